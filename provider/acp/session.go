package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/toolsession"
)

// outputBuffer is how many outputs an agent may get ahead of its host
// before its session/update notifications wait for the host to pull.
const outputBuffer = 16

// hostToolsName names the host-tools listener in LaunchSpec.Expose.
const hostToolsName = "host-tools"

// adapter is an instance's provider.Adapter; resumer adds the Resumer
// port for agents that offer session/load or session/resume.
type adapter struct{ in *instance }

type resumer struct{ adapter }

var (
	_ provider.Adapter = adapter{}
	_ provider.Resumer = resumer{}
)

func (a adapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	s, err := a.in.open(ctx, req.SessionID, req.WorkingDirectory, req.Configuration, req.HostTools, req.Interactions, "")
	if err != nil {
		return nil, err
	}
	req.OnBinding(s.binding)
	return s, nil
}

func (r resumer) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	return r.in.open(ctx, req.SessionID, req.WorkingDirectory, req.Configuration, req.HostTools, req.Interactions, req.Binding)
}

// session is one ACP session in its own agent process.
type session struct {
	in            *instance
	id            string // the host's session id
	label         string
	ws            *workspace
	terms         *terminals
	hosts         *hostServer
	ag            *agentProc
	closeDeclared bool
	// life ends when the session closes: the agent's calls waiting on the
	// session give up.
	life    context.Context
	endLife context.CancelFunc
	// ia is the host's session interactions (nil: none); asking ends when
	// the session starts closing, cancelling the elicitations in flight.
	ia         provider.Interactions
	asking     context.Context
	stopAsking context.CancelFunc

	mu      sync.Mutex
	binding provider.Binding
	// agentSID is the agent's session id: the binding, except in a session
	// reopened afresh (the agent could not resume the binding), which
	// keeps the conversation's binding over a new agent session.
	agentSID string
	// fresh, set in a session reopened afresh, says why: the next turn
	// tells the person, and the agent, that the agent's memory is new.
	fresh string
	instr string // host-binding instructions, for the next prompt
	// release, for a session that took a pooled agent, lets the pool
	// refill: called once its first turn ended, or at teardown.
	release func()
	turn    *turn
	reqN    int
	elicitN int
	closing bool
	closed  bool
	// model is the model the agent said the session uses (its
	// currentModelId), "" when it said none; totals are the usage totals
	// the agent last reported, for an agent whose reports are cumulative.
	model  string
	totals *sdk.Usage
}

var (
	_ provider.Session     = (*session)(nil)
	_ provider.Interrupter = (*session)(nil)
	_ provider.Workspacer  = (*session)(nil)
)

// Workspace is the session's workspace: the agent's working directory,
// where the files a person puts in are what the agent sees.
func (s *session) Workspace(context.Context) (string, error) { return s.ws.dir, nil }

func (s *session) Binding() provider.Binding { return s.binding }

// boundTo is the agent's session id, which every call names.
func (s *session) boundTo() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agentSID
}

func (s *session) setBinding(b provider.Binding) {
	s.mu.Lock()
	s.binding, s.agentSID = b, string(b)
	s.mu.Unlock()
}

func (s *session) emit(t event.Type, payload any) { s.in.emit(s.id, t, payload) }

// open starts an agent process and opens (or reopens, when resume is
// set) its session.
func (in *instance) open(ctx context.Context, sessionID, workDir string, rawCfg []byte, ht provider.HostTools, ia provider.Interactions, resume provider.Binding) (*session, error) {
	if r, perr := in.currentReadiness(); r != provider.Ready {
		if perr != nil {
			return nil, fmt.Errorf("%w (%s): %w", ErrNotReady, r, perr)
		}
		return nil, fmt.Errorf("%w (%s)", ErrNotReady, r)
	}
	scfg, err := ParseSessionConfig(rawCfg)
	if err != nil {
		return nil, err
	}
	if err := checkWorkspace(in.cfg.WorkspaceRoot, workDir); err != nil {
		return nil, err
	}
	env, err := in.credentialEnv(scfg)
	if err != nil {
		return nil, err
	}
	mode, model := in.cfg.Mode, in.cfg.Model
	if scfg.Mode != "" {
		mode = scfg.Mode
	}
	if scfg.Model != "" {
		model = scfg.Model
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(in.cfg.Limits.StartTimeout))
	defer cancel()

	// A new conversation takes a pooled agent when one waits: its
	// workspace becomes the conversation's.
	var pa *pooled
	if resume == "" && in.pool != nil && adoptable(workDir) {
		if pa = in.pool.take(); pa != nil {
			slot, err := pa.adopt(workDir)
			if err != nil {
				_ = pa.discard(context.WithoutCancel(ctx), time.Duration(in.cfg.Limits.StopTimeout))
				pa = nil
			} else {
				workDir = slot
			}
		}
	}
	// The agent works in the directory as resolved, so a conversation
	// started in a pooled agent's workspace resumes in the same one.
	if real, err := filepath.EvalSymlinks(workDir); err == nil {
		workDir = real
	}

	ws, err := openWorkspace(workDir, in.cfg.Limits.MaxFileBytes)
	if err != nil {
		if pa != nil {
			_ = pa.discard(context.WithoutCancel(ctx), time.Duration(in.cfg.Limits.StopTimeout))
		}
		return nil, err
	}
	s := &session{in: in, id: sessionID, label: toolsession.HashKey("acp/" + in.id + "/" + sessionID), ws: ws, ia: ia}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.asking, s.stopAsking = context.WithCancel(s.life)
	s.terms = newTerminals(nil, ws, in.env, in.cfg.Limits.TerminalOutputBytes, in.cfg.Limits.MaxTerminals, s.emit)
	fail := func(err error) (*session, error) {
		if cerr := s.teardown(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	fits := false
	if pa != nil {
		if fits, err = s.take(ctx, pa, ht); err != nil {
			return fail(err)
		}
	} else if err := s.launch(ctx, workDir, ht, env); err != nil {
		return fail(err)
	}
	s.terms.setProcess(s.ag.proc)
	servers := []sdk.McpServer{}
	if s.hosts != nil {
		addr := s.ag.proc.Addr(hostToolsName)
		if addr == "" {
			return fail(errors.New("acp: the launcher did not make the host-tools server reachable from inside the agent's confinement"))
		}
		servers = append(servers, s.hosts.server(addr))
	}

	caps := s.ag.init.AgentCapabilities
	var st opened
	if fits {
		// The pooled agent's session, opened ahead in this workspace.
		s.setBinding(provider.Binding(pa.pre.SessionId))
		st = opened{pa.pre.Modes, pa.pre.ConfigOptions}
	} else {
		if pa != nil && caps.SessionCapabilities.Close != nil {
			// Its session lists other host tools: a new one replaces it.
			_, _ = s.ag.conn.CloseSession(ctx, sdk.CloseSessionRequest{SessionId: pa.pre.SessionId})
		}
		if st, err = s.bind(ctx, caps, workDir, servers, resume); err != nil {
			return fail(err)
		}
	}
	err = s.configure(ctx, st, mode, model)
	var gone *sdk.RequestError
	if err != nil && resume != "" && s.boundTo() == string(resume) && errors.As(err, &gone) && gone.Code == resourceNotFound {
		// The agent said it reopened the session, then did not know it
		// (claude-agent-acp loads lazily): it is afresh after all.
		if st, err = s.afresh(ctx, workDir, servers, resume, fmt.Errorf("it does not know its session (JSON-RPC error %d: %s)", gone.Code, gone.Message)); err == nil {
			err = s.configure(ctx, st, mode, model)
		}
	}
	if err != nil {
		return fail(err)
	}
	s.closeDeclared = caps.SessionCapabilities.Close != nil
	if !in.register(s) {
		return fail(ErrDisposed)
	}
	return s, nil
}

// take makes the pooled agent pa the session's: its client, its events,
// its host tools. It reports whether the session the agent opened ahead
// fits the conversation (see takeHostTools).
func (s *session) take(ctx context.Context, pa *pooled, ht provider.HostTools) (bool, error) {
	s.ag = pa.ag
	s.release = pa.release
	pa.events.bind(s.id)
	pa.late.bind(&client{s})
	fits, why, err := s.takeHostTools(ctx, pa, ht)
	if err == nil {
		s.emit(TypeAgentTaken, &AgentTaken{Label: pa.label, Reopened: why})
	}
	return fits, err
}

// takeHostTools gives the session a pooled agent's host tools, and
// reports whether the session the agent opened ahead fits the
// conversation (when not, why). It fits when the conversation lends
// exactly the tools that session's MCP server lists (then bound to the
// conversation's binding now), or lends none and the session lists none.
// Otherwise the agent's host-tools server serves the conversation's tools
// (none: it stops) under a new secret, for a session opened again.
func (s *session) takeHostTools(ctx context.Context, pa *pooled, ht provider.HostTools) (bool, string, error) {
	switch {
	case pa.hosts == nil && ht == nil:
		_ = pa.ln.Close()
		return true, "", nil
	case pa.hosts == nil:
		return false, "the conversation lends host tools and the agent's session was opened without them",
			s.serveHostTools(ht, pa.ag.guard, pa.ln)
	case ht == nil:
		return false, "the conversation lends no host tools and the agent's session lists some", pa.hosts.close(ctx)
	}
	s.hosts = pa.hosts
	if instr := ht.Instructions(); instr != nil {
		s.instr = instr.Text
	}
	if sameHostTools(pa.lent.specs, ht.Tools()) && pa.lent.bind(ht) {
		return true, "", nil
	}
	return false, "the conversation lends other host tools than the agent's session lists", pa.hosts.replace(ctx, ht)
}

// serveHostTools starts the session's host-tools server on ln (a
// listener of its own when nil) when the host lent tools; a pooled
// agent's listener, unused, is closed.
func (s *session) serveHostTools(ht provider.HostTools, g *guard, ln net.Listener) error {
	if ht == nil {
		if ln != nil {
			_ = ln.Close()
		}
		return nil
	}
	var err error
	s.hosts, err = startHostServer(ht, s.in.forward(s.id), g, s.in.cfg.Limits, ln)
	if err != nil {
		return err
	}
	if instr := ht.Instructions(); instr != nil {
		s.instr = instr.Text
	}
	return nil
}

// launch starts the session's own agent. One guard bounds what the agent
// asks of the client, over ACP and over the host tools' MCP server alike.
func (s *session) launch(ctx context.Context, workDir string, ht provider.HostTools, env []string) error {
	in := s.in
	g := in.newGuard(s.label, in.forward(s.id))
	if err := s.serveHostTools(ht, g, nil); err != nil {
		return err
	}
	var expose []Exposed
	if s.hosts != nil {
		expose = []Exposed{{Name: hostToolsName, Listener: s.hosts.ln}}
	}
	var err error
	s.ag, err = in.launch(ctx, launchRequest{label: s.label, workspace: workDir, home: in.keptHome(workDir), events: in.forward(s.id),
		expose: expose, client: &client{s}, guard: g, env: env, auth: in.cfg.sessionAuth()})
	return err
}

// opened is what the agent said of a session it opened: its modes and
// its configuration options (the model among them).
type opened struct {
	modes   *sdk.SessionModeState
	options []sdk.SessionConfigOption
}

// bind opens the agent's session: session/new, or, to resume, session/load
// (else session/resume) of the binding.
func (s *session) bind(ctx context.Context, caps sdk.AgentCapabilities, workDir string, servers []sdk.McpServer, resume provider.Binding) (opened, error) {
	if resume == "" {
		resp, err := s.ag.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: workDir, McpServers: servers})
		if err != nil {
			return opened{}, s.ag.failure("session/new", err)
		}
		s.setBinding(provider.Binding(resp.SessionId))
		s.noteModel(resp.Models)
		return opened{resp.Modes, resp.ConfigOptions}, nil
	}
	st, err := s.reopen(ctx, caps, workDir, servers, resume)
	var refused *sdk.RequestError
	switch {
	case err == nil:
		return st, nil
	case errors.Is(err, errCannotResume):
	case errors.As(err, &refused) && !s.ag.exited():
		err = fmt.Errorf("it refused to reopen its session (JSON-RPC error %d: %s)", refused.Code, refused.Message)
	default:
		return opened{}, s.ag.failure("session/"+s.reopenCall(caps), err)
	}
	return s.afresh(ctx, workDir, servers, resume, err)
}

// resourceNotFound is ACP's JSON-RPC error for a session the agent does
// not know.
const resourceNotFound = -32002

// configure sets the opened session's mode (when one is asked for) and
// model. Its error keeps the agent's JSON-RPC error.
func (s *session) configure(ctx context.Context, st opened, mode, model string) error {
	if mode != "" {
		if err := s.setMode(ctx, st.modes, mode); err != nil {
			return err
		}
	}
	return s.setModel(ctx, st.options, model)
}

// afresh opens a new agent session for a conversation whose agent cannot
// resume it (why): under the conversation's binding, its memory new, the
// transcript kept; the next turn says so.
func (s *session) afresh(ctx context.Context, workDir string, servers []sdk.McpServer, resume provider.Binding, why error) (opened, error) {
	resp, err := s.ag.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: workDir, McpServers: servers})
	if err != nil {
		return opened{}, s.ag.failure("session/new", err)
	}
	s.mu.Lock()
	s.binding, s.agentSID = resume, string(resp.SessionId)
	s.fresh = why.Error()
	s.mu.Unlock()
	s.noteModel(resp.Models)
	s.emit(TypeSessionAfresh, &SessionAfresh{Why: why.Error()})
	return opened{resp.Modes, resp.ConfigOptions}, nil
}

// freshNote opens the first prompt to an agent session opened afresh for
// a conversation that had one: the agent is told it has lost its memory
// of it.
const freshNote = "[note: this conversation began earlier, in an agent session that could not be reopened; you do not remember it. The person still sees the earlier transcript: ask them what you need.]"

// errCannotResume: the agent offers neither session/load nor
// session/resume.
var errCannotResume = errors.New("the agent offers neither session/load nor session/resume")

// reopenCall names the call that reopens a session: load, else resume.
func (s *session) reopenCall(caps sdk.AgentCapabilities) string {
	if caps.LoadSession {
		return "load"
	}
	return "resume"
}

// reopen reopens the binding's agent session with session/load, else
// session/resume; the agent's own error when it refuses.
func (s *session) reopen(ctx context.Context, caps sdk.AgentCapabilities, workDir string, servers []sdk.McpServer, resume provider.Binding) (opened, error) {
	switch {
	case caps.LoadSession:
		s.setBinding(resume)
		resp, err := s.ag.conn.LoadSession(ctx, sdk.LoadSessionRequest{Cwd: workDir, McpServers: servers, SessionId: sdk.SessionId(resume)})
		if err != nil {
			return opened{}, err
		}
		s.noteModel(resp.Models)
		return opened{resp.Modes, resp.ConfigOptions}, nil
	case caps.SessionCapabilities.Resume != nil:
		s.setBinding(resume)
		resp, err := s.ag.conn.ResumeSession(ctx, sdk.ResumeSessionRequest{Cwd: workDir, McpServers: servers, SessionId: sdk.SessionId(resume)})
		if err != nil {
			return opened{}, err
		}
		s.noteModel(resp.Models)
		return opened{resp.Modes, resp.ConfigOptions}, nil
	}
	return opened{}, errCannotResume
}

// setMode switches the new session to mode, refusing a mode the agent
// does not offer.
func (s *session) setMode(ctx context.Context, modes *sdk.SessionModeState, mode string) error {
	if modes == nil || len(modes.AvailableModes) == 0 {
		return errors.New("acp: the configuration names a mode but the agent offers no session modes; remove mode")
	}
	ids := make([]string, 0, len(modes.AvailableModes))
	found := false
	for _, m := range modes.AvailableModes {
		ids = append(ids, string(m.Id))
		found = found || string(m.Id) == mode
	}
	if !found {
		return fmt.Errorf("acp: the agent offers no mode %q; it offers %s", mode, strings.Join(ids, ", "))
	}
	if string(modes.CurrentModeId) == mode {
		return nil
	}
	if _, err := s.ag.conn.SetSessionMode(ctx, sdk.SetSessionModeRequest{SessionId: sdk.SessionId(s.boundTo()), ModeId: sdk.SessionModeId(mode)}); err != nil {
		return s.ag.failure("session/set_mode", err)
	}
	return nil
}

// item is one output on its way to the host; perm is set when the output
// is a permission request.
type item struct {
	out  provider.Output
	perm *permission
}

// permission is a session/request_permission waiting for the host.
type permission struct {
	id      string
	options []sdk.PermissionOption
	answer  chan sdk.RequestPermissionOutcome // buffered: one answer
}

func (p *permission) cancel() {
	select {
	case p.answer <- sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{}}:
	default:
	}
}

// turn is one session/prompt and the outputs its updates produced.
type turn struct {
	id       string
	out      chan item
	gone     chan struct{} // closed when nobody will pull again
	goneOnce sync.Once
	done     chan struct{} // closed when session/prompt returned
	resp     sdk.PromptResponse
	err      error
	began    time.Time // when the prompt was sent: the agent's wall time runs from here

	mu          sync.Mutex
	pending     *permission // yielded to the host, not answered
	waiting     bool        // the host holds the request; nobody pulls
	interrupted bool
}

func (t *turn) stop() {
	t.goneOnce.Do(func() { close(t.gone) })
	t.mu.Lock()
	p := t.pending
	t.pending = nil
	t.mu.Unlock()
	if p != nil {
		p.cancel()
	}
}

func (t *turn) isInterrupted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.interrupted
}

func (s *session) current() *turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

func (s *session) output(kind provider.OutputKind, turnID string, set func(*provider.Output)) provider.Output {
	o := provider.Output{Kind: kind, SessionID: s.id, TurnID: turnID}
	if set != nil {
		set(&o)
	}
	return o
}

// push hands an item to the turn's puller, waiting while the host has
// not pulled what came before.
func (s *session) push(ctx context.Context, t *turn, it item) bool {
	select {
	case t.out <- it:
		return true
	case <-t.gone:
	case <-s.life.Done():
	case <-ctx.Done():
	}
	return false
}

// update maps one session/update to an output of the active turn. With
// no active turn (a session/load replaying history) it is dropped.
func (s *session) update(ctx context.Context, u sdk.SessionUpdate) {
	text, act := describeUpdate(u)
	if text == "" && act == "" {
		return
	}
	t := s.current()
	if t == nil {
		return
	}
	kind, body := provider.OutputText, text
	if text == "" {
		kind, body = provider.OutputActivity, act
	}
	s.push(ctx, t, item{out: s.output(kind, t.id, func(o *provider.Output) {
		o.Text = body
		if kind == provider.OutputActivity {
			o.Call = callOf(u)
		}
	})})
}

var cancelled = sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{}}}

// permission raises an approval request in the active turn and waits for
// the host's answer. Without a turn, or once the turn is interrupted or
// abandoned, the answer is cancelled.
func (s *session) permission(ctx context.Context, p sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	t := s.current()
	if t == nil || t.isInterrupted() {
		return cancelled
	}
	s.mu.Lock()
	s.reqN++
	id := "permission-" + strconv.Itoa(s.reqN)
	s.mu.Unlock()
	perm := &permission{id: id, options: p.Options, answer: make(chan sdk.RequestPermissionOutcome, 1)}
	tool := ""
	if p.ToolCall.Title != nil {
		tool = *p.ToolCall.Title
	} else if p.ToolCall.Kind != nil {
		tool = string(*p.ToolCall.Kind)
	}
	choices := make([]string, 0, len(p.Options))
	for _, o := range p.Options {
		choices = append(choices, string(o.Kind))
	}
	req := &provider.Request{ID: id, Kind: provider.RequestApproval, Prompt: permissionPrompt(tool, p.Options), Tool: tool, Args: permissionArgs(p.ToolCall), Choices: choices}
	if !s.push(ctx, t, item{out: s.output(provider.OutputRequest, t.id, func(o *provider.Output) { o.Request = req }), perm: perm}) {
		return cancelled
	}
	select {
	case o := <-perm.answer:
		return sdk.RequestPermissionResponse{Outcome: o}
	case <-ctx.Done():
	case <-t.gone:
	case <-s.life.Done():
	}
	return cancelled
}

func permissionPrompt(tool string, opts []sdk.PermissionOption) string {
	var b strings.Builder
	b.WriteString("The agent asks permission")
	if tool != "" {
		b.WriteString(" for: " + tool)
	}
	b.WriteString(". It offers:")
	for _, o := range opts {
		b.WriteString(" " + string(o.Kind) + " (" + o.Name + ")")
	}
	return b.String()
}

// choose maps a resolution to one of the options the agent offered:
// approve picks allow_once, reject picks reject_once (else
// reject_always); a note of "always" picks the *_always option instead.
// An approval the agent offers no matching option for is answered
// cancelled: a person's "yes, once" never becomes "always".
func choose(opts []sdk.PermissionOption, res provider.Resolution) (sdk.RequestPermissionOutcome, string) {
	always := strings.EqualFold(strings.TrimSpace(res.Note), "always")
	var prefs []sdk.PermissionOptionKind
	switch {
	case res.Approve && always:
		prefs = []sdk.PermissionOptionKind{sdk.PermissionOptionKindAllowAlways}
	case res.Approve:
		prefs = []sdk.PermissionOptionKind{sdk.PermissionOptionKindAllowOnce}
	case always:
		prefs = []sdk.PermissionOptionKind{sdk.PermissionOptionKindRejectAlways, sdk.PermissionOptionKindRejectOnce}
	default:
		prefs = []sdk.PermissionOptionKind{sdk.PermissionOptionKindRejectOnce, sdk.PermissionOptionKindRejectAlways}
	}
	for _, k := range prefs {
		for _, o := range opts {
			if o.Kind == k {
				return sdk.RequestPermissionOutcome{Selected: &sdk.RequestPermissionOutcomeSelected{OptionId: o.OptionId, Outcome: "selected"}}, string(k)
			}
		}
	}
	return sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}, "cancelled"
}

func itoa(n int) string { return strconv.Itoa(n) }

func notStarted(format string, args ...any) error {
	return fmt.Errorf("%w: acp: "+format, append([]any{provider.ErrNotStarted}, args...)...)
}

func (s *session) RunTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		if err := provider.CheckStep(ctx, provider.StepAgent); err != nil { // the host's, before the agent acts
			yield(provider.Output{}, notStarted("%v", err))
			return
		}
		s.mu.Lock()
		switch {
		case s.closing || s.closed:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("the session is closing"))
			return
		case s.turn != nil:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("a turn is active in this session"))
			return
		}
		if s.ag.exited() {
			s.mu.Unlock()
			// Not ErrNotStarted: the session cannot be trusted any more.
			yield(provider.Output{}, s.ag.failure("session/prompt", ErrAgentExited))
			return
		}
		t := &turn{id: req.TurnID, out: make(chan item, outputBuffer), gone: make(chan struct{}), done: make(chan struct{}), began: time.Now()}
		s.turn = t
		blocks := []sdk.ContentBlock{}
		fresh := s.fresh
		s.fresh = ""
		if fresh != "" {
			blocks = append(blocks, sdk.TextBlock(freshNote))
		}
		if s.instr != "" {
			blocks = append(blocks, sdk.TextBlock(s.instr))
			s.instr = ""
		}
		if req.Context != "" { // the host's note: a block of its own, before the person's words
			blocks = append(blocks, sdk.TextBlock(req.Context))
		}
		blocks = append(blocks, sdk.TextBlock(req.Input))
		binding := s.agentSID
		s.mu.Unlock()

		sent := s.ag.input.expect()
		go func() {
			defer close(t.done)
			t.resp, t.err = s.ag.conn.Prompt(s.life, sdk.PromptRequest{SessionId: sdk.SessionId(binding), Prompt: blocks, Meta: traceMeta(ctx)})
			s.releasePool()
		}()
		// turn.started once the prompt is on its way: an interrupt from
		// here on reaches the agent after it.
		select {
		case <-sent:
		case <-t.done:
		}
		if !yield(s.output(provider.OutputTurnStarted, t.id, nil), nil) {
			s.abandon(t)
			return
		}
		if fresh != "" && !yield(s.output(provider.OutputActivity, t.id, func(o *provider.Output) {
			o.Text = "the agent's memory of this conversation is new (" + fresh + "); the conversation's transcript is kept"
		}), nil) {
			s.abandon(t)
			return
		}
		s.pull(ctx, t, yield)
	}
}

func (s *session) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		t := s.current()
		if t == nil || t.id != res.TurnID {
			yield(provider.Output{}, notStarted("no turn with that id is waiting"))
			return
		}
		t.mu.Lock()
		p := t.pending
		if p == nil || p.id != res.RequestID {
			t.mu.Unlock()
			yield(provider.Output{}, notStarted("no request with that id is pending"))
			return
		}
		t.pending, t.waiting = nil, false
		t.mu.Unlock()
		outcome, chosen := choose(p.options, res)
		if err := provider.CheckStep(ctx, provider.StepAgent); err != nil { // the host's, before the agent goes on
			outcome, chosen = sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}, "cancelled (the host stopped standing behind the turn)"
		}
		p.answer <- outcome
		if !yield(s.output(provider.OutputActivity, t.id, func(o *provider.Output) { o.Text = "answered " + p.id + ": " + chosen }), nil) {
			s.abandon(t)
			return
		}
		s.pull(ctx, t, yield)
	}
}

// pull hands the turn's outputs to the host until the turn ends or raises
// a request.
func (s *session) pull(ctx context.Context, t *turn, yield func(provider.Output, error) bool) {
	for {
		select {
		case it := <-t.out:
			if !s.deliver(t, it, yield) {
				return
			}
			continue
		case <-t.done:
		case <-ctx.Done():
			s.abandon(t)
			yield(provider.Output{}, fmt.Errorf("acp: the turn's context ended: %w", context.Cause(ctx)))
			return
		}
		break
	}
	// session/prompt returned; what its updates produced is all here.
	for more := true; more; {
		select {
		case it := <-t.out:
			if it.perm != nil {
				it.perm.cancel() // raised as the turn ended: nobody can answer
				continue
			}
			if !yield(it.out, nil) {
				s.abandon(t)
				return
			}
		default:
			more = false
		}
	}
	outs, err := s.conclude(t)
	// What the turn used goes first, also before the error of a turn
	// that failed.
	outs = append([]provider.Output{s.usage(t)}, outs...)
	for _, o := range outs {
		if !yield(o, nil) {
			return
		}
	}
	if err != nil {
		yield(provider.Output{}, err)
	}
}

// deliver yields one item; it reports whether pulling goes on.
func (s *session) deliver(t *turn, it item, yield func(provider.Output, error) bool) bool {
	if it.perm != nil {
		t.mu.Lock()
		if t.interrupted {
			t.mu.Unlock()
			it.perm.cancel()
			return true
		}
		t.pending, t.waiting = it.perm, true
		t.mu.Unlock()
		yield(it.out, nil)
		return false // the turn waits for Resolve or Interrupt
	}
	if !yield(it.out, nil) {
		s.abandon(t)
		return false
	}
	return true
}

// abandon gives up a turn nobody pulls: the agent is told to cancel and
// every pending question is answered cancelled. The validated wrapper
// quarantines the session.
func (s *session) abandon(t *turn) {
	t.stop()
	_ = s.ag.conn.Cancel(context.WithoutCancel(s.life), sdk.CancelNotification{SessionId: sdk.SessionId(s.boundTo())})
}

// conclude maps how session/prompt ended to the turn's last outputs, or
// to an error when the agent is gone.
func (s *session) conclude(t *turn) ([]provider.Output, error) {
	s.mu.Lock()
	if s.turn == t {
		s.turn = nil
	}
	s.mu.Unlock()
	completed := func(outcome provider.Outcome) provider.Output {
		return s.output(provider.OutputTurnCompleted, t.id, func(o *provider.Output) { o.Outcome = outcome })
	}
	activity := func(text string) provider.Output {
		return s.output(provider.OutputActivity, t.id, func(o *provider.Output) { o.Text = text })
	}
	if t.err != nil {
		if s.ag.exited() {
			return nil, s.ag.failure("session/prompt", t.err)
		}
		if t.isInterrupted() {
			return []provider.Output{completed(provider.OutcomeInterrupted)}, nil
		}
		var re *sdk.RequestError
		if errors.As(t.err, &re) {
			return []provider.Output{activity(fmt.Sprintf("the agent failed the turn (JSON-RPC error %d)", re.Code)), completed(provider.OutcomeFailed)}, nil
		}
		return nil, fmt.Errorf("acp: session/prompt: %w", t.err)
	}
	var outs []provider.Output
	switch t.resp.StopReason {
	case sdk.StopReasonEndTurn:
		outs = append(outs, completed(provider.OutcomeCompleted))
	case sdk.StopReasonCancelled:
		outs = append(outs, completed(provider.OutcomeInterrupted))
	default:
		outs = append(outs, activity("the agent stopped: "+stopReasonText(t.resp.StopReason)), completed(provider.OutcomeFailed))
	}
	return outs, nil
}

func stopReasonText(r sdk.StopReason) string {
	switch r {
	case sdk.StopReasonMaxTokens:
		return "it reached its token limit"
	case sdk.StopReasonMaxTurnRequests:
		return "it reached its limit of model requests for one turn"
	case sdk.StopReasonRefusal:
		return "it refused"
	}
	return "for a reason it did not name"
}

// Interrupt sends session/cancel. A running turn then ends at
// turn.completed (interrupted); a waiting one has its request answered
// cancelled and ends here, once the agent has ended the prompt.
func (s *session) Interrupt(ctx context.Context, turnID string) error {
	t := s.current()
	if t == nil || t.id != turnID {
		return nil // not begun, or over: turn ids are never reused
	}
	t.mu.Lock()
	t.interrupted = true
	p, waiting := t.pending, t.waiting
	t.pending, t.waiting = nil, false
	t.mu.Unlock()
	err := s.ag.conn.Cancel(ctx, sdk.CancelNotification{SessionId: sdk.SessionId(s.boundTo())})
	if p != nil {
		p.cancel()
	}
	if err != nil && !s.ag.exited() {
		return fmt.Errorf("acp: sending session/cancel: %w", err)
	}
	if !waiting {
		return nil
	}
	for {
		select {
		case it := <-t.out:
			if it.perm != nil {
				it.perm.cancel()
			}
		case <-t.done:
			s.mu.Lock()
			if s.turn == t {
				s.turn = nil
			}
			s.mu.Unlock()
			if t.err != nil && s.ag.exited() {
				return s.ag.failure("session/prompt", t.err)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("acp: the agent did not end the cancelled turn before the interrupt's deadline: %w", context.Cause(ctx))
		}
	}
}

// Close ends the session: its terminals are killed, session/close is sent
// when the agent offers it, the agent process is stopped (SIGTERM, then
// SIGKILL after the stop timeout), and the host-tools server shut down.
func (s *session) Close(ctx context.Context, _ provider.CloseReason) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	t := s.turn
	s.mu.Unlock()
	// The agent hears its elicitations cancelled before it is stopped.
	s.stopAsking()
	if t != nil {
		t.stop()
	}
	if err := s.teardown(ctx); err != nil {
		s.mu.Lock()
		s.closing = false
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	s.closed, s.closing = true, false
	s.mu.Unlock()
	s.in.forget(s)
	return nil
}

// releasePool lets the pool refill the place of the pooled agent this
// session took (a no-op for one started cold, and after the first call).
func (s *session) releasePool() {
	if s.release != nil {
		s.release()
	}
}

// teardown frees what the session holds; it is safe on a session whose
// opening failed half way, and to call again after it failed.
func (s *session) teardown(ctx context.Context) error {
	var errs []error
	if err := s.terms.closeAll(ctx); err != nil {
		errs = append(errs, err)
	}
	s.releasePool()
	grace := time.Duration(s.in.cfg.Limits.StopTimeout)
	if s.ag != nil {
		if b := s.boundTo(); s.closeDeclared && !s.ag.exited() && b != "" {
			cctx, cancel := context.WithTimeout(ctx, grace)
			_, _ = s.ag.conn.CloseSession(cctx, sdk.CloseSessionRequest{SessionId: sdk.SessionId(b)})
			cancel()
		}
		if err := s.ag.shutdown(ctx, grace); err != nil {
			errs = append(errs, err)
		}
	}
	s.endLife()
	if t := s.current(); t != nil {
		select {
		case <-t.done:
		case <-ctx.Done():
			errs = append(errs, errors.New("acp: the turn did not end before the close's deadline"))
		}
	}
	if s.hosts != nil {
		if err := s.hosts.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		_ = s.ws.close()
	}
	return errors.Join(errs...)
}

// permissionArgs is what a permission request is about, for the person
// asked: a file edit's diff as the agent sent it ({"path","oldText",
// "newText"}; oldText absent for a new file), else the call's raw input
// when it is a JSON object, else nil.
func permissionArgs(tc sdk.ToolCallUpdate) json.RawMessage {
	return callInput(tc.Content, tc.RawInput)
}
