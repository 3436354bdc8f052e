//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/jail"
)

// claudeAgentACPEnv names the directory .ci/run installs
// @agentclientprotocol/claude-agent-acp into (npm --prefix);
// defaultClaudeAgentACP is where it looks otherwise.
const (
	claudeAgentACPEnv     = "AGENTRY_CLAUDE_AGENT_ACP"
	defaultClaudeAgentACP = "/var/cache/agentry/claude-agent-acp"
)

// claudeAgentACP finds the installed adapter's command, failing under
// CI=true and skipping elsewhere when it is absent or cannot be jailed.
func claudeAgentACP(t *testing.T) string {
	t.Helper()
	return npmAgent(t, claudeAgentACPEnv, defaultClaudeAgentACP, "claude-agent-acp", "@agentclientprotocol/claude-agent-acp@0.101.0")
}

// npmAgent finds the command bin of the npm package pkg installed (npm
// --prefix) into the directory the environment variable env names, def
// when it is unset. Like every test that needs a tool, it fails under
// CI=true and skips elsewhere when the agent is absent or cannot be
// jailed here.
func npmAgent(t *testing.T, env, def, bin, pkg string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		dir = def
	}
	path := filepath.Join(dir, "node_modules", ".bin", bin)
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	if _, err := os.Stat(path); err != nil {
		skip("%s is not installed at %s (.ci/run installs it: npm install --prefix %s %s): %v", bin, dir, dir, pkg, err)
	}
	needAgentJail(t)
	return path
}

// needAgentJail fails the test under CI=true, and skips it elsewhere,
// when this machine cannot jail an agent.
func needAgentJail(t *testing.T) {
	t.Helper()
	a, err := jail.NewAgent(jail.AgentOptions{})
	if err == nil {
		err = a.Check(context.Background())
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot jail the agent here: %v", err)
		}
		t.Skipf("cannot jail the agent here: %v", err)
	}
}

// agentInstallDir is a directory of its own (named from prefix, removed
// with the test) where the jail's user can run an agent: mode 0755, and
// outside /tmp, which the jail's private /tmp would hide.
func agentInstallDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The bar: a real Claude Code, through claude-agent-acp, served by
// the built binary with `agentry serve --agent acp`, jailed, driven
// offline by a local server speaking Anthropic's Messages wire format.
// It writes a file in its workspace with its own Write tool after a
// permission request approved through POST …/decision; it calls the
// lent run_code tool over MCP; a write outside its workspace fails, and
// so does a dial to the host's own port (a jail event); the events file
// audits clean; the turn's usage is structured data in GET /v1/usage.
func TestServeClaudeAgentACP(t *testing.T) {
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)

	var hostPort atomicString
	agent := &scriptedAgent{marker: "Write", steps: []func(modelwire.Turn) modelwire.Reply{
		func(turn modelwire.Turn) modelwire.Reply {
			return callTool("Write", map[string]any{"file_path": filepath.Join(conversationWorkspace(t, dir), "hello.txt"), "content": "written by claude code\n"})
		},
		func(turn modelwire.Turn) modelwire.Reply {
			return callTool("Write", map[string]any{"file_path": filepath.Join(filepath.Dir(conversationWorkspace(t, dir)), "escape.txt"), "content": "out\n"})
		},
		func(modelwire.Turn) modelwire.Reply {
			return callTool("mcp__agentry__run_code", map[string]any{"code": "print(6*7)"})
		},
		func(modelwire.Turn) modelwire.Reply {
			return callTool("Bash", map[string]any{"command": "python3 -c \"import socket; socket.create_connection(('127.0.0.1', " + hostPort.get() + "), 3); print('REACHED')\"", "description": "dial the host", "timeout": 30000})
		},
	}}
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: agent.script})
	defer model.Close()

	// serve passes the agent its own values, named by --agent-env NAME;
	// the recipe's HOME holds the CLI the adapter runs (docs/acp.md).
	p := startServeBinary(t, bin, append(claudeOfflineEnv(model.URL), "CLAUDE_CODE_EXECUTABLE="+claudeRecipeCLI),
		claudeServeArgs(agentCmd, model.URL, dir, "--agent-home", claudeHome(t, agentCmd), "--agent-env", "CLAUDE_CODE_EXECUTABLE",
			"--lend", "run_code", "--runner", "jail", "--store", filepath.Join(dir, "agentry.db"), "--events", events)...)
	pu, _ := url.Parse(p.url)
	hostPort.set(pu.Port())

	body, approved := approvedTurn(t, p, "Write hello.txt, then show me what you can reach.")
	approvals := len(approved)
	seen := agent.results()
	t.Logf("answer: %s", body)
	if !strings.Contains(string(body), "All done.") {
		b, _ := os.ReadFile(events)
		t.Logf("events:\n%s", b)
		t.Fatalf("the turn did not end with the model's answer: %s\nmodel saw: %q\n%s", body, seen, p.stderr)
	}
	if approvals == 0 {
		t.Fatal("no permission request reached the decision endpoint")
	}

	// The file is in the conversation's workspace, written through the
	// adapter's fs; nothing landed beside it.
	matches, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "hello.txt"))
	if len(matches) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "*"))
		t.Logf("the workspaces hold %v", all)
	}
	if len(matches) != 1 {
		b, _ := os.ReadFile(events)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "acp.file") {
				t.Log(l)
			}
		}
		t.Fatalf("hello.txt in the workspaces: %v\nmodel saw: %q", matches, seen)
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "written by claude code\n" {
		t.Fatalf("hello.txt holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "workspaces", "escape.txt")); err == nil {
		t.Fatal("the agent wrote outside its workspace")
	}
	joined := strings.Join(seen, "\n")
	if !strings.Contains(joined, "42") {
		t.Errorf("the lent run_code's result did not reach the model: %q", seen)
	}
	if strings.Contains(joined, "REACHED") {
		t.Errorf("the agent reached the host's own port: %q", seen)
	}

	checkUsage(t, p)
	stopAndCheckJailed(t, p, bin, events, pu.Port())
}

// stopAndCheckJailed stops a serve process that hosted a real ACP agent
// and reads its events file: the agent started in the jail, its dial of
// the host's own port (port) was refused with a connection_refused event,
// and `agentry events audit` is clean.
func stopAndCheckJailed(t *testing.T, p *process, bin, events, port string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}
	f, err := os.Open(events)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var refusedHost, startedJailed bool
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"agentry.jail.connection_refused"`) && strings.Contains(line, "127.0.0.1:"+port) {
			refusedHost = true
		}
		if strings.Contains(line, `"agentry.acp.agent_started"`) && strings.Contains(line, `"launcher":"jail"`) {
			startedJailed = true
		}
	}
	if !startedJailed {
		t.Error("no agent_started event with launcher jail")
	}
	if !refusedHost {
		t.Error("no connection_refused event for the host's own port")
	}
	// The command's own audit, as a person would run it.
	out, err := exec.Command(bin, "events", "audit", events).CombinedOutput()
	if err != nil {
		t.Errorf("agentry events audit: %v\n%s", err, out)
	}
}

// approvedTurn opens a session on the serving binary and runs one turn,
// approving every permission request it pauses on through POST
// …/decision. It returns the turn's last answer and the tools approved.
func approvedTurn(t *testing.T, p *process, message string) (answer []byte, approved []string) {
	t.Helper()
	code, body := p.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s\n%s", code, body, p.stderr)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	msg, _ := json.Marshal(map[string]string{"message": message})
	code, body = p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/turns", string(msg))
	for range 10 {
		if code != 200 && code != 202 {
			t.Fatalf("turn: %d %s\n%s", code, body, p.stderr)
		}
		var r struct {
			Awaiting *struct{ Question, Tool string }
		}
		_ = json.Unmarshal(body, &r)
		if r.Awaiting == nil {
			break
		}
		approved = append(approved, r.Awaiting.Tool)
		t.Logf("approving %s", r.Awaiting.Tool)
		code, body = p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/decision", `{"approve":true}`)
	}
	return body, approved
}

var workingDirRE = regexp.MustCompile(`(?i)working directory: (\S+)`)

// workingDirectory reads the workspace from Claude Code's system prompt.
func workingDirectory(system string) string {
	if m := workingDirRE.FindStringSubmatch(system); m != nil {
		return m[1]
	}
	return "/nonexistent"
}

// conversationWorkspace finds the one conversation's workspace under
// dir/workspaces (not its agent's HOME beside it): claude-agent-acp 0.101 no longer names its working
// directory in the prompt, and the jail mounts the workspace at the same
// path, so the host-side path is the agent's too.
func conversationWorkspace(t *testing.T, dir string) string {
	entries, err := os.ReadDir(filepath.Join(dir, "workspaces"))
	if err != nil {
		t.Errorf("reading the workspaces: %v", err)
		return "/nonexistent"
	}
	var found []string
	for _, e := range entries {
		// A conversation that took a pooled agent has a link to its
		// pool workspace.
		if (e.IsDir() || e.Type()&os.ModeSymlink != 0) && !strings.HasPrefix(e.Name(), "pool-") && !strings.HasSuffix(e.Name(), ".home") {
			found = append(found, filepath.Join(dir, "workspaces", e.Name()))
		}
	}
	if len(found) != 1 {
		t.Errorf("want one conversation workspace, found %v", found)
		return "/nonexistent"
	}
	return found[0]
}

// scriptedAgent plays a coding agent's model. A request that offers the
// agent's marker tool gets the step its tool results so far point at: the
// first with none (a request the agent makes on the side gets it again,
// which the agent drops), the next after each; past the steps it answers
// "All done.". A request without the marker (a title, a summary) gets a
// plain text.
type scriptedAgent struct {
	marker string
	steps  []func(modelwire.Turn) modelwire.Reply

	mu   sync.Mutex
	seen []string // the tool results the model was given, in order
}

func (a *scriptedAgent) script(turn modelwire.Turn) modelwire.Reply {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(turn.Tools, a.marker) {
		return modelwire.Reply{Text: "Offline test"}
	}
	step := 0
	if len(turn.ToolResults) > 0 {
		a.seen = append(a.seen, strings.Join(turn.ToolResults, " | "))
		step = len(a.seen)
	}
	if step < len(a.steps) {
		return a.steps[step](turn)
	}
	return modelwire.Reply{Text: "All done."}
}

// results returns the tool results the model was given so far.
func (a *scriptedAgent) results() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// callTool is a model reply calling one tool.
func callTool(name string, args map[string]any) modelwire.Reply {
	b, _ := json.Marshal(args)
	return modelwire.Reply{Calls: []modelwire.Call{{Name: name, Args: b}}}
}

// agentDir is a real-agent test's directory, which the jail's user can
// traverse to the workspaces, and its events file.
func agentDir(t *testing.T) (dir, events string) {
	t.Helper()
	dir = t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, filepath.Join(dir, "events.ndjson")
}

// writeTemplate writes a file of a HOME template, making its directories.
func writeTemplate(t *testing.T, home, rel, content string) {
	t.Helper()
	p := filepath.Join(home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

type atomicString struct {
	mu sync.Mutex
	v  string
}

func (a *atomicString) set(v string) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *atomicString) get() string  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }

// stopAndCheckEvents stops a serve process that hosted a real ACP agent
// and reads its events file: the agent started in the jail, hello.txt was
// written through the client (an acp.file event), nothing off the
// allowlist was tried, and `agentry events audit` is clean.
func stopAndCheckEvents(t *testing.T, p *process, bin, events string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	var startedJailed, wroteThroughClient bool
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, `"agentry.acp.agent_started"`) && strings.Contains(line, `"launcher":"jail"`):
			startedJailed = true
		case strings.Contains(line, `"agentry.acp.file"`) && strings.Contains(line, `"op":"write","path":"hello.txt"`):
			wroteThroughClient = true
		case strings.Contains(line, `"agentry.jail.connection_refused"`):
			t.Errorf("the agent tried a place off its allowlist: %s", line)
		}
	}
	if !startedJailed {
		t.Error("no agent_started event with launcher jail")
	}
	if !wroteThroughClient {
		t.Error("no acp.file event for the write of hello.txt: it did not come through the client")
	}
	if out, err := exec.Command(bin, "events", "audit", events).CombinedOutput(); err != nil {
		t.Errorf("agentry events audit: %v\n%s", err, out)
	}
}

// claudeRecipeCLI is where the recipe's HOME puts the CLI claude-agent-acp
// runs (CLAUDE_CODE_EXECUTABLE): in the jail, HOME is /home/agent.
const claudeRecipeCLI = "/home/agent/bin/claude"

// claudeHome writes docs/acp.md's HOME template for Claude Code: bin/claude
// answers the adapter's per-prompt `claude auth status --json` for a key
// in ANTHROPIC_API_KEY and runs the CLI the adapter bundles for the rest.
func claudeHome(t *testing.T, agentCmd string) string {
	t.Helper()
	cli := filepath.Join(filepath.Dir(filepath.Dir(agentCmd)), "@anthropic-ai", "claude-agent-sdk-linux-x64", "claude")
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Claude CLI claude-agent-acp bundles is missing: %v", err)
	}
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	shim := "#!/bin/sh\n" +
		"if [ \"$*\" = \"auth status --json\" ] && [ -n \"$ANTHROPIC_API_KEY\" ]; then\n" +
		"  echo '{\"loggedIn\":true,\"authMethod\":\"api_key\",\"apiProvider\":\"firstParty\",\"apiKeySource\":\"ANTHROPIC_API_KEY\"}'\n" +
		"  exit 0\n" +
		"fi\n" +
		"exec " + cli + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(home, "bin", "claude"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	return home
}

// claudeOfflineEnv is the environment serve passes a jailed Claude agent
// (each named by --agent-env NAME, never given as a value on the command
// line): the local model server, its key, and no traffic of its own.
func claudeOfflineEnv(modelURL string) []string {
	return []string{"ANTHROPIC_BASE_URL=" + modelURL, "ANTHROPIC_API_KEY=sk-ant-offline",
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
}

// claudeServeArgs are serve's arguments for a jailed claude-agent-acp
// (agentCmd) on the local model server at modelURL: each variable of
// claudeOfflineEnv passed by name, the server's host let through the
// jail, the agent's own permission mode, workspaces under dir; then more.
func claudeServeArgs(agentCmd, modelURL, dir string, more ...string) []string {
	u, err := url.Parse(modelURL)
	if err != nil {
		panic(err) // a test server's URL
	}
	args := []string{"--agent", "acp", "--agent-cmd", agentCmd}
	for _, kv := range claudeOfflineEnv(modelURL) {
		name, _, _ := strings.Cut(kv, "=")
		args = append(args, "--agent-env", name)
	}
	args = append(args, "--agent-allow-host", u.Host, "--agent-mode", "default", "--workspaces", filepath.Join(dir, "workspaces"))
	return append(args, more...)
}
