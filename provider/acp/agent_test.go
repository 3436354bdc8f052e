package acp_test

// The scripted ACP agent: the test binary, re-executed with
// ACP_SCRIPTED_AGENT=1, speaks ACP on stdio through the SDK's agent side.
// What it does is chosen by the prompt's last text block:
//
//	hello              thought, two message chunks, a plan, a tool call and its update, usage
//	ask                a permission request; "chose <option>"; allowed → writes notes.txt
//	run COMMAND        a permission request for an execute tool call "Run" whose
//	                   raw input is {"command","description"}; "chose <option>"
//	run-always COMMAND the same, offering only allow_always and reject_once
//	forever            runs until cancelled
//	crash              a message chunk, then exits with status 3
//	read PATH          fs/read_text_file
//	fscaps             says which file calls the client offered in initialize
//	write PATH TEXT    fs/write_text_file
//	writecwd NAME TEXT fs/write_text_file of NAME in the session's cwd
//	term ARGV...       terminal/create, wait_for_exit, output, release
//	termcwd DIR ARGV…  the same, in DIR
//	tool TEXT          calls the host tool conformance_echo over MCP
//	mode               says the session's mode
//	model              says the session's model (its model config option)
//	trace              says the traceparent of the prompt's _meta
//	turns              says how many prompts the session has had
//	fail               answers session/prompt with an error
//	maxtokens          stops with max_tokens
//	elicit [MESSAGE]   a form elicitation of one string; says how it was answered
//	elicit-enum        a form elicitation of one choice among red, green, blue
//	elicit-oneof       the same choice as oneOf consts
//	elicit-url         a URL elicitation
//	elicit-rich        a form of two fields
//	burst N R GATE     a terminal running cat GATE, then N terminal/wait_for_exit
//	                   at once; says "busy R: <refusal>" once R were refused,
//	                   then, when the rest returned, "done ok=… busy=… other=…"
//	flood N PATH       N fs/read_text_file of PATH at once, without waiting
//	stderr TEXT        writes TEXT to its standard error, then exits 5
//
// A workspace holding a file named slow-new makes session/new send one
// fs/write_text_file, wait until the client abandons it
// ($/cancel_request), then write new-cancelled there; the agent ignores
// SIGTERM meanwhile. session/set_mode and session/set_config_option
// append what they set to .scripted/sets in the session's workspace.
//
// Knobs (environment): ACP_SCRIPTED_RESUME=load|resume|none (default
// load), ACP_SCRIPTED_AUTH=env (an env-var method needing SCRIPTED_KEY)
// or agent (codex-acp's methods api-key and chat-gpt, declared as the
// agent's own; api-key needs SCRIPTED_KEY=right and session/new answers
// that authentication is required until it succeeded),
// ACP_SCRIPTED_VERSION=N (default 1), ACP_SCRIPTED_NO_MCP=1,
// ACP_SCRIPTED_STATE=home (its sessions are kept in its HOME, not in the
// workspace).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const scriptedEnv = "ACP_SCRIPTED_AGENT"

func runScriptedAgent() {
	a := &scripted{sessions: map[sdk.SessionId]*scriptedSession{}}
	a.conn = sdk.NewAgentSideConnection(a, os.Stdout, os.Stdin)
	<-a.conn.Done()
	os.Exit(0)
}

type scripted struct {
	conn   *sdk.AgentSideConnection
	fs     sdk.FileSystemCapabilities // what the client offered
	authed atomic.Bool

	mu       sync.Mutex
	sessions map[sdk.SessionId]*scriptedSession
}

type scriptedSession struct {
	// cancel is closed by session/cancel. The SDK cancels a prompt's
	// context only when the prompt's handler has started, and a cancel
	// can overtake it; the prompt watches this too.
	cancel chan struct{}
	cwd    string
	mode   string
	model  string
	mcp    []sdk.McpServer
	turns  int
}

var (
	_ sdk.Agent       = (*scripted)(nil)
	_ sdk.AgentLoader = (*scripted)(nil)
)

func resumeKind() string {
	if k := os.Getenv("ACP_SCRIPTED_RESUME"); k != "" {
		return k
	}
	return "load"
}

func (a *scripted) Initialize(_ context.Context, req sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	a.mu.Lock()
	a.fs = req.ClientCapabilities.Fs
	a.mu.Unlock()
	version := 1
	if v, err := strconv.Atoi(os.Getenv("ACP_SCRIPTED_VERSION")); err == nil {
		version = v
	}
	caps := sdk.AgentCapabilities{
		LoadSession:         resumeKind() == "load" || resumeKind() == "lazy",
		McpCapabilities:     sdk.McpCapabilities{Http: os.Getenv("ACP_SCRIPTED_NO_MCP") == ""},
		SessionCapabilities: sdk.SessionCapabilities{Close: &sdk.SessionCloseCapabilities{}},
	}
	if resumeKind() == "resume" {
		caps.SessionCapabilities.Resume = &sdk.SessionResumeCapabilities{}
	}
	resp := sdk.InitializeResponse{ProtocolVersion: sdk.ProtocolVersion(version), AgentCapabilities: caps, AuthMethods: []sdk.AuthMethod{}}
	switch os.Getenv("ACP_SCRIPTED_AUTH") {
	case "env":
		resp.AuthMethods = []sdk.AuthMethod{{EnvVar: &sdk.AuthMethodEnvVarInline{Id: "scripted-key", Name: "Scripted key", Type: "env_var",
			Vars: []sdk.AuthEnvVar{{Name: "SCRIPTED_KEY"}}}}}
	case "agent":
		resp.AuthMethods = []sdk.AuthMethod{{Agent: &sdk.AuthMethodAgent{Id: "api-key", Name: "API Key"}},
			{Agent: &sdk.AuthMethodAgent{Id: "chat-gpt", Name: "ChatGPT"}}}
	}
	return resp, nil
}

func (a *scripted) Authenticate(_ context.Context, p sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	want := "scripted-key"
	if os.Getenv("ACP_SCRIPTED_AUTH") == "agent" {
		want = "api-key"
	}
	if p.MethodId != want || os.Getenv("SCRIPTED_KEY") != "right" {
		return sdk.AuthenticateResponse{}, errors.New("wrong key")
	}
	a.authed.Store(true)
	return sdk.AuthenticateResponse{}, nil
}

// modelOptions is the session's model option: small or large.
func modelOptions(current string) []sdk.SessionConfigOption {
	cat := sdk.SessionConfigOptionCategoryModel
	opts := sdk.SessionConfigSelectOptionsUngrouped{{Name: "Small", Value: "small"}, {Name: "Large", Value: "large"}}
	return []sdk.SessionConfigOption{{Select: &sdk.SessionConfigOptionSelect{Id: "model", Name: "Model", Type: "select",
		Category: &cat, CurrentValue: sdk.SessionConfigValueId(current), Options: sdk.SessionConfigSelectOptions{Ungrouped: &opts}}}}
}

// slowNew says it waits (an fs/write_text_file the client refuses: the
// session has no id yet, but the client reports the call), waits until
// the client abandons session/new, then leaves new-cancelled in the
// workspace.
func (a *scripted) slowNew(ctx context.Context, cwd string) error {
	signal.Ignore(syscall.SIGTERM)
	_, _ = a.conn.WriteTextFile(ctx, sdk.WriteTextFileRequest{SessionId: "not-yet", Path: filepath.Join(cwd, "waiting"), Content: "x"})
	<-ctx.Done()
	return os.WriteFile(filepath.Join(cwd, "new-cancelled"), []byte("yes"), 0o644)
}

func modes(current string) *sdk.SessionModeState {
	return &sdk.SessionModeState{CurrentModeId: sdk.SessionModeId(current),
		AvailableModes: []sdk.SessionMode{{Id: "default", Name: "Default"}, {Id: "plan", Name: "Plan"}}}
}

// stateFile keeps a session's turn count in its workspace (or, with
// ACP_SCRIPTED_STATE=home, in its HOME, as Claude Code keeps its
// sessions under ~/.claude), so a new process can load it.
func stateFile(cwd string, id sdk.SessionId) string {
	if os.Getenv("ACP_SCRIPTED_STATE") == "home" {
		cwd = os.Getenv("HOME")
	}
	return filepath.Join(cwd, ".scripted", string(id))
}

func (a *scripted) NewSession(ctx context.Context, p sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	if os.Getenv("ACP_SCRIPTED_AUTH") == "agent" && !a.authed.Load() {
		return sdk.NewSessionResponse{}, sdk.NewAuthRequired(nil)
	}
	if _, err := os.Stat(filepath.Join(p.Cwd, "slow-new")); err == nil {
		return sdk.NewSessionResponse{}, a.slowNew(ctx, p.Cwd)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := sdk.SessionId("scripted-" + hex.EncodeToString(b[:]))
	a.mu.Lock()
	a.sessions[id] = &scriptedSession{cwd: p.Cwd, mode: "default", model: "small", mcp: p.McpServers, cancel: make(chan struct{})}
	a.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(stateFile(p.Cwd, id)), 0o755); err != nil {
		return sdk.NewSessionResponse{}, err
	}
	if err := os.WriteFile(stateFile(p.Cwd, id), []byte("0"), 0o644); err != nil {
		return sdk.NewSessionResponse{}, err
	}
	if err := noteNew(p.Cwd, p.McpServers); err != nil {
		return sdk.NewSessionResponse{}, err
	}
	return sdk.NewSessionResponse{SessionId: id, Modes: modes("default"), ConfigOptions: modelOptions("small")}, nil
}

func (a *scripted) reopen(cwd string, id sdk.SessionId, servers []sdk.McpServer) (*scriptedSession, error) {
	b, err := os.ReadFile(stateFile(cwd, id))
	if err != nil {
		return nil, errors.New("no such session")
	}
	n, _ := strconv.Atoi(string(b))
	s := &scriptedSession{cwd: cwd, mode: "default", mcp: servers, turns: n, cancel: make(chan struct{})}
	a.mu.Lock()
	a.sessions[id] = s
	a.mu.Unlock()
	return s, nil
}

func (a *scripted) LoadSession(ctx context.Context, p sdk.LoadSessionRequest) (sdk.LoadSessionResponse, error) {
	s, err := a.reopen(p.Cwd, p.SessionId, p.McpServers)
	if err != nil && resumeKind() == "lazy" {
		// As claude-agent-acp 0.101: the load succeeds, and the next call
		// naming the session finds none.
		return sdk.LoadSessionResponse{Modes: modes("default")}, nil
	}
	if err != nil {
		return sdk.LoadSessionResponse{}, err
	}
	// Replay the history, as session/load does.
	for i := range s.turns {
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: p.SessionId, Update: sdk.UpdateUserMessageText(fmt.Sprintf("prompt %d", i+1))})
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: p.SessionId, Update: sdk.UpdateAgentMessageText(fmt.Sprintf("replayed answer %d", i+1))})
	}
	return sdk.LoadSessionResponse{Modes: modes("default")}, nil
}

func (a *scripted) ResumeSession(_ context.Context, p sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	if resumeKind() != "resume" {
		return sdk.ResumeSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionResume)
	}
	if _, err := a.reopen(p.Cwd, p.SessionId, p.McpServers); err != nil {
		return sdk.ResumeSessionResponse{}, err
	}
	return sdk.ResumeSessionResponse{Modes: modes("default")}, nil
}

func (a *scripted) session(id sdk.SessionId) (*scriptedSession, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[id]
	if s == nil {
		return nil, &sdk.RequestError{Code: -32002, Message: "Resource not found", Data: string(id)}
	}
	return s, nil
}

func (a *scripted) SetSessionMode(_ context.Context, p sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return sdk.SetSessionModeResponse{}, err
	}
	a.mu.Lock()
	s.mode = string(p.ModeId)
	a.mu.Unlock()
	return sdk.SetSessionModeResponse{}, noteSet(s.cwd, "set_mode "+string(p.ModeId))
}

func (a *scripted) CloseSession(_ context.Context, p sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	a.mu.Lock()
	delete(a.sessions, p.SessionId)
	a.mu.Unlock()
	return sdk.CloseSessionResponse{}, nil
}

func (a *scripted) Cancel(_ context.Context, p sdk.CancelNotification) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[p.SessionId]; s != nil {
		select {
		case <-s.cancel:
		default:
			close(s.cancel)
		}
	}
	return nil
}

func (a *scripted) ListSessions(context.Context, sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionList)
}

func (a *scripted) SetSessionConfigOption(_ context.Context, p sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	v := p.ValueId
	if v == nil || v.ConfigId != "model" || (v.Value != "small" && v.Value != "large") {
		return sdk.SetSessionConfigOptionResponse{}, sdk.NewInvalidParams(nil)
	}
	s, err := a.session(v.SessionId)
	if err != nil {
		return sdk.SetSessionConfigOptionResponse{}, err
	}
	a.mu.Lock()
	s.model = string(v.Value)
	a.mu.Unlock()
	return sdk.SetSessionConfigOptionResponse{ConfigOptions: modelOptions(string(v.Value))}, noteSet(s.cwd, "set_config_option "+string(v.Value))
}

// noteNew notes a session/new in the workspace: a line "new N" (N MCP
// servers given) appended to .scripted/new, and the servers in
// .scripted/mcp.json, for a test to count the calls and reach the servers
// as the agent does.
func noteNew(cwd string, servers []sdk.McpServer) error {
	// With ACP_SCRIPTED_STATE=home the turn counts are in HOME, and the
	// workspace's .scripted is made here.
	if err := os.MkdirAll(filepath.Join(cwd, ".scripted"), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(cwd, ".scripted", "new"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "new %d\n", len(servers))
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	b, err := json.Marshal(servers)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cwd, ".scripted", "mcp.json"), b, 0o644)
}

// noteSet appends what a mode or model change asked to .scripted/sets in
// the session's workspace: a test reads when, and how often, it came.
func noteSet(cwd, what string) error {
	f, err := os.OpenFile(filepath.Join(cwd, ".scripted", "sets"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, what)
	return errors.Join(err, f.Close())
}

func (a *scripted) say(ctx context.Context, id sdk.SessionId, u sdk.SessionUpdate) {
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: id, Update: u})
}

func (a *scripted) Prompt(ctx context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	a.mu.Lock()
	s.turns++
	n := s.turns
	cancelled := s.cancel
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		s.cancel = make(chan struct{})
		a.mu.Unlock()
	}()
	var stop func()
	ctx, stop = context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-cancelled:
			stop()
		case <-ctx.Done():
		}
	}()
	_ = os.WriteFile(stateFile(s.cwd, p.SessionId), []byte(strconv.Itoa(n)), 0o644)

	text := ""
	if l := len(p.Prompt); l > 0 && p.Prompt[l-1].Text != nil {
		text = p.Prompt[l-1].Text.Text
	}
	cmd, rest, _ := strings.Cut(text, " ")
	id := p.SessionId
	answer := func(s string) (sdk.PromptResponse, error) {
		a.say(ctx, id, sdk.UpdateAgentMessageText(s))
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
	}
	switch cmd {
	case "ask":
		a.say(ctx, id, sdk.StartToolCall("call-1", "Write notes.txt", sdk.WithStartKind(sdk.ToolKindEdit), sdk.WithStartStatus(sdk.ToolCallStatusPending)))
		resp, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{SessionId: id,
			ToolCall: sdk.ToolCallUpdate{ToolCallId: "call-1", Title: sdk.Ptr("Write notes.txt")},
			Options: []sdk.PermissionOption{
				{OptionId: "yes", Name: "Allow", Kind: sdk.PermissionOptionKindAllowOnce},
				{OptionId: "yes-always", Name: "Always allow", Kind: sdk.PermissionOptionKindAllowAlways},
				{OptionId: "no", Name: "Reject", Kind: sdk.PermissionOptionKindRejectOnce},
				{OptionId: "no-never", Name: "Never", Kind: sdk.PermissionOptionKindRejectAlways},
			}})
		if err != nil {
			return sdk.PromptResponse{}, err
		}
		if resp.Outcome.Cancelled != nil {
			// The client cancels a waiting permission after it sends
			// session/cancel, and the two may be handled here in either
			// order: take the cancel for this prompt before ending it,
			// so it cannot cancel the next one (bounded: a client may
			// also cancel a permission without a session/cancel).
			select {
			case <-cancelled:
			case <-time.After(2 * time.Second):
			}
			return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
		}
		chosen := string(resp.Outcome.Selected.OptionId)
		if strings.HasPrefix(chosen, "yes") {
			if _, err := a.conn.WriteTextFile(ctx, sdk.WriteTextFileRequest{SessionId: id, Path: filepath.Join(s.cwd, "notes.txt"), Content: "approved\n"}); err != nil {
				return answer("write failed: " + err.Error())
			}
		}
		return answer("chose " + chosen)
	case "run", "run-always":
		opts := []sdk.PermissionOption{
			{OptionId: "yes", Name: "Allow", Kind: sdk.PermissionOptionKindAllowOnce},
			{OptionId: "yes-always", Name: "Always allow", Kind: sdk.PermissionOptionKindAllowAlways},
			{OptionId: "no", Name: "Reject", Kind: sdk.PermissionOptionKindRejectOnce},
		}
		if cmd == "run-always" {
			opts = opts[1:]
		}
		resp, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{SessionId: id,
			ToolCall: sdk.ToolCallUpdate{ToolCallId: "call-run", Title: sdk.Ptr("Run"), Kind: sdk.Ptr(sdk.ToolKindExecute),
				RawInput: map[string]any{"command": rest, "description": "runs it"}},
			Options: opts})
		if err != nil {
			return sdk.PromptResponse{}, err
		}
		if resp.Outcome.Cancelled != nil {
			return answer("cancelled")
		}
		return answer("chose " + string(resp.Outcome.Selected.OptionId))
	case "blocks": // what the prompt held, one block after another
		var texts []string
		for _, b := range p.Prompt {
			if b.Text != nil {
				texts = append(texts, b.Text.Text)
			}
		}
		return answer(strings.Join(texts, " | "))
	case "forever":
		<-ctx.Done()
		return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
	case "crash":
		a.say(ctx, id, sdk.UpdateAgentMessageText("about to crash"))
		os.Exit(3)
	case "fscaps":
		a.mu.Lock()
		fs := a.fs
		a.mu.Unlock()
		return answer(fmt.Sprintf("read=%v write=%v", fs.ReadTextFile, fs.WriteTextFile))
	case "read":
		r, err := a.conn.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: id, Path: rest})
		if err != nil {
			return answer("error: " + err.Error())
		}
		return answer("content: " + r.Content)
	case "write", "writecwd":
		path, content, _ := strings.Cut(rest, " ")
		if cmd == "writecwd" {
			path = filepath.Join(s.cwd, path)
		}
		if _, err := a.conn.WriteTextFile(ctx, sdk.WriteTextFileRequest{SessionId: id, Path: path, Content: content}); err != nil {
			return answer("error: " + err.Error())
		}
		return answer("wrote")
	case "term", "termcwd":
		args := strings.Fields(rest)
		req := sdk.CreateTerminalRequest{SessionId: id}
		if cmd == "termcwd" {
			req.Cwd, args = sdk.Ptr(args[0]), args[1:]
		}
		req.Command, req.Args = args[0], args[1:]
		if filepath.Base(req.Command) == "sh" && len(req.Args) > 1 { // sh -c 'a script with spaces'
			req.Args = []string{req.Args[0], strings.Join(req.Args[1:], " ")}
		}
		t, err := a.conn.CreateTerminal(ctx, req)
		if err != nil {
			return answer("error: " + err.Error())
		}
		w, err := a.conn.WaitForTerminalExit(ctx, sdk.WaitForTerminalExitRequest{SessionId: id, TerminalId: t.TerminalId})
		if err != nil {
			return answer("error: " + err.Error())
		}
		o, err := a.conn.TerminalOutput(ctx, sdk.TerminalOutputRequest{SessionId: id, TerminalId: t.TerminalId})
		if err != nil {
			return answer("error: " + err.Error())
		}
		if _, err := a.conn.ReleaseTerminal(ctx, sdk.ReleaseTerminalRequest{SessionId: id, TerminalId: t.TerminalId}); err != nil {
			return answer("error: " + err.Error())
		}
		code := -1
		if w.ExitCode != nil {
			code = *w.ExitCode
		}
		return answer(fmt.Sprintf("exit=%d truncated=%v output=%s", code, o.Truncated, o.Output))
	case "tool":
		out, err := callHostTool(ctx, s.mcp, rest)
		if err != nil {
			return answer("tool error: " + err.Error())
		}
		return answer("tool said: " + out)
	case "mode":
		a.mu.Lock()
		m := s.mode
		a.mu.Unlock()
		return answer("mode " + m)
	case "model":
		a.mu.Lock()
		m := s.model
		a.mu.Unlock()
		return answer("model " + m)
	case "trace":
		tp, _ := p.Meta["traceparent"].(string)
		return answer("traceparent " + tp)
	case "turns":
		return answer(fmt.Sprintf("turns %d", n))
	case "fail":
		return sdk.PromptResponse{}, sdk.NewInternalError(map[string]any{"error": "scripted failure"})
	case "elicit", "elicit-enum", "elicit-oneof", "elicit-url", "elicit-rich":
		resp, err := a.conn.UnstableCreateElicitation(ctx, scriptedElicitation(cmd, rest))
		if err != nil {
			return answer("elicitation error: " + err.Error())
		}
		switch {
		case resp.Accept != nil:
			b, _ := json.Marshal(resp.Accept.Content)
			return answer("accepted " + string(b))
		case resp.Decline != nil:
			return answer("declined")
		case resp.Cancel != nil:
			return answer("cancelled")
		}
		return answer("no answer")
	case "burst":
		return a.burst(ctx, id, rest)
	case "flood":
		n, path, _ := strings.Cut(rest, " ")
		count, _ := strconv.Atoi(n)
		var wg sync.WaitGroup
		var ok, busy, other atomic.Int64
		for range count {
			wg.Go(func() {
				_, err := a.conn.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: id, Path: path})
				switch {
				case err == nil:
					ok.Add(1)
				case strings.Contains(err.Error(), "too many requests"):
					busy.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		wg.Wait()
		return answer(fmt.Sprintf("ok=%d busy=%d other=%d", ok.Load(), busy.Load(), other.Load()))
	case "stderr":
		fmt.Fprintln(os.Stderr, rest)
		os.Exit(5)
	case "maxtokens":
		a.say(ctx, id, sdk.UpdateAgentMessageText("cut"))
		return sdk.PromptResponse{StopReason: sdk.StopReasonMaxTokens}, nil
	}
	a.say(ctx, id, sdk.UpdateAgentThoughtText("considering"))
	a.say(ctx, id, sdk.UpdateAgentMessageText("hello "))
	a.say(ctx, id, sdk.UpdateAgentMessageText("back"))
	a.say(ctx, id, sdk.UpdatePlan(sdk.PlanEntry{Content: "greet", Status: sdk.PlanEntryStatusCompleted, Priority: sdk.PlanEntryPriorityHigh}))
	a.say(ctx, id, sdk.StartToolCall("call-9", "Look around", sdk.WithStartKind(sdk.ToolKindRead), sdk.WithStartStatus(sdk.ToolCallStatusInProgress)))
	a.say(ctx, id, sdk.UpdateToolCall("call-9", sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted)))
	a.say(ctx, id, sdk.SessionUpdate{UsageUpdate: &sdk.SessionUsageUpdate{Used: 120, Size: 200000}})
	return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: &sdk.Usage{InputTokens: 100, OutputTokens: 20, TotalTokens: 120}}, nil
}

// burst runs "burst N R GATE" (see the list above).
func (a *scripted) burst(ctx context.Context, id sdk.SessionId, rest string) (sdk.PromptResponse, error) {
	answer := func(s string) (sdk.PromptResponse, error) {
		a.say(ctx, id, sdk.UpdateAgentMessageText(s))
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
	}
	f := strings.Fields(rest)
	if len(f) != 3 {
		return answer("error: burst N R GATE")
	}
	n, _ := strconv.Atoi(f[0])
	want, _ := strconv.Atoi(f[1])
	t, err := a.conn.CreateTerminal(ctx, sdk.CreateTerminalRequest{SessionId: id, Command: "cat", Args: []string{f[2]}})
	if err != nil {
		return answer("error: " + err.Error())
	}
	results := make(chan error, n)
	for range n {
		go func() {
			_, err := a.conn.WaitForTerminalExit(ctx, sdk.WaitForTerminalExitRequest{SessionId: id, TerminalId: t.TerminalId})
			results <- err
		}()
	}
	if want == 0 {
		a.say(ctx, id, sdk.UpdateAgentMessageText("busy 0: none\n"))
	}
	var ok, busy int
	var other string
	for range n {
		switch err := <-results; {
		case err == nil:
			ok++
		case strings.Contains(err.Error(), "too many requests"):
			busy++
			if busy == want {
				a.say(ctx, id, sdk.UpdateAgentMessageText(fmt.Sprintf("busy %d: %s\n", busy, err.Error())))
			}
		default:
			other = err.Error()
		}
	}
	_, _ = a.conn.ReleaseTerminal(ctx, sdk.ReleaseTerminalRequest{SessionId: id, TerminalId: t.TerminalId})
	return answer(fmt.Sprintf("done ok=%d busy=%d other=%s", ok, busy, other))
}

func scriptedElicitation(cmd, message string) sdk.UnstableCreateElicitationRequest {
	if message == "" {
		message = "What should I call the file?"
	}
	form := func(props map[string]any, required ...string) sdk.UnstableCreateElicitationRequest {
		return sdk.UnstableCreateElicitationRequest{Form: &sdk.UnstableCreateElicitationForm{Message: message,
			RequestedSchema: sdk.UnstableElicitationSchema{Type: sdk.UnstableElicitationSchemaTypeObject, Properties: props, Required: required}}}
	}
	switch cmd {
	case "elicit-enum":
		return form(map[string]any{"colour": map[string]any{"type": "string", "title": "Colour", "enum": []string{"red", "green", "blue"}}}, "colour")
	case "elicit-oneof":
		return form(map[string]any{"colour": map[string]any{"type": "string", "oneOf": []map[string]any{
			{"const": "red", "title": "Red"}, {"const": "green", "title": "Green"}}}}, "colour")
	case "elicit-url":
		return sdk.UnstableCreateElicitationRequest{Url: &sdk.UnstableCreateElicitationUrl{ElicitationId: "login-1",
			Message: "Sign in to continue.", Url: "https://example.test/login?code=42"}}
	case "elicit-rich":
		return form(map[string]any{"name": map[string]any{"type": "string"}, "age": map[string]any{"type": "integer"}}, "name")
	}
	return form(map[string]any{"name": map[string]any{"type": "string", "description": "a file name"}}, "name")
}

// headers adds fixed headers to every request.
type headers struct {
	h  []sdk.HttpHeader
	rt http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for _, x := range h.h {
		r.Header.Set(x.Name, x.Value)
	}
	return h.rt.RoundTrip(r)
}

func callHostTool(ctx context.Context, servers []sdk.McpServer, text string) (string, error) {
	if len(servers) == 0 || servers[0].Http == nil {
		return "", errors.New("no MCP server was given")
	}
	srv := servers[0].Http
	tr := &mcp.StreamableClientTransport{Endpoint: srv.Url,
		HTTPClient: &http.Client{Transport: headers{h: srv.Headers, rt: http.DefaultTransport}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "scripted", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "conformance_echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return "", err
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	out := strings.Join(parts, "")
	if res.IsError {
		return "", errors.New(out)
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}
