package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/tool"
)

// cli runs the command in-process with its own stdin, stdout and stderr.
func cli(t *testing.T, ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// needPython skips, loudly, where there is no python3 — except in CI.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is missing and CI=true: install python3 (Debian: apt-get install python3)")
		}
		t.Skip("LOUD: python3 is not on PATH; this test runs Python (apt-get install python3)")
	}
}

func jailWorks() bool { return local.CheckJail(context.Background(), local.Jail{}) == nil }

// readEvents returns the events of an NDJSON file.
func readEvents(t *testing.T, path string) []event.Event {
	t.Helper()
	var evs []event.Event
	for _, f := range audit.Read([]string{path}, func(e event.Event) { evs = append(evs, e) }) {
		if f.Err != "" || f.Bad > 0 || (f.Missing && f.Path == path) {
			t.Fatalf("reading %s: %+v", path, f)
		}
	}
	return evs
}

// auditClean checks the events file: sessions were opened, every one
// closed, none failed, no run ended with one open.
func auditClean(t *testing.T, path string, wantOpened int) *audit.Report {
	t.Helper()
	r := audit.Audit([]string{path})
	opened := 0
	for _, ts := range r.Tools {
		opened += ts.Opened
	}
	if r.Problems() || len(r.FailedCloses) > 0 || opened != wantOpened {
		b, _ := json.MarshalIndent(r, "", "  ")
		t.Fatalf("audit of %s: %d opened (want %d), problems:\n%s", path, opened, wantOpened, b)
	}
	return r
}

func TestRunPrints42(t *testing.T) {
	needPython(t)
	out, errout, err := cli(t, context.Background(), "", "run", "print(6*7)")
	if err != nil || out != "42\n" {
		t.Fatalf("run 'print(6*7)': %q, %v\nstderr: %s", out, err, errout)
	}
	if jailWorks() == strings.Contains(errout, "UNJAILED") {
		t.Fatalf("the default runner must be jailed exactly when bubblewrap can jail (jail works: %v); stderr: %s", jailWorks(), errout)
	}
}

func TestRunRunnerKinds(t *testing.T) {
	needPython(t)
	kinds := []string{"process", "interpreter"}
	if jailWorks() {
		kinds = append(kinds, "jail")
	} else {
		t.Log("LOUD: bubblewrap cannot build a jail here; --runner jail is checked for its refusal only")
		_, _, err := cli(t, context.Background(), "", "run", "--runner", "jail", "print(1)")
		if exitCode(err) != 1 || !errors.Is(err, local.ErrNoJail) {
			t.Fatalf("--runner jail without a jail: %v", err)
		}
	}
	for _, k := range kinds {
		// State persists within a turn only on the interpreter; the
		// calculator makes one call per turn, so each kind prints the
		// same.
		out, errout, err := cli(t, context.Background(), "", "run", "--runner", k, "x = 6\nprint(x * 7)")
		if err != nil || out != "42\n" || errout != "" {
			t.Fatalf("--runner %s: %q, %v, stderr %q", k, out, err, errout)
		}
	}
}

func TestRunJSON(t *testing.T) {
	needPython(t)
	out, _, err := cli(t, context.Background(), "", "run", "--runner", "interpreter", "--json", "```python\nprint(sum(range(10)))\n```")
	if err != nil {
		t.Fatal(err)
	}
	var r runResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json printed no JSON: %v\n%s", err, out)
	}
	if r.Output != "45" || !strings.HasPrefix(r.RunID, "run-") || r.Error != "" || r.Conversation == nil {
		t.Fatalf("result %+v", r)
	}
	msgs := r.Conversation.Messages
	if len(msgs) != 4 || msgs[1].ToolCalls[0].Name != "run_code" || msgs[2].Content != "45" || msgs[3].Content != "45" {
		t.Fatalf("conversation %+v", msgs)
	}
	if r.Conversation.Identity != nil {
		t.Fatalf("an identity was synthesised: %+v", r.Conversation.Identity)
	}
}

// Identity reaches the events only when given; the events file audits
// clean.
func TestRunEventsAndIdentity(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	with := filepath.Join(dir, "with.ndjson")
	out, _, err := cli(t, context.Background(), "", "run", "--runner", "interpreter", "--events", with,
		"--tenant", "acme", "--principal", "alice", "--session", "conv-7", "print(6*7)")
	if err != nil || out != "42\n" {
		t.Fatalf("%q, %v", out, err)
	}
	auditClean(t, with, 1)
	var sawCodeRun bool
	for _, e := range readEvents(t, with) {
		m := e.Meta
		if m.SessionID != "conv-7" || m.AgentID != "agentry-run" {
			t.Fatalf("%s: meta %+v", e.Type, m)
		}
		if e.Type == tool.TypeSessionStarted || e.Type == code.TypeRun || e.Type == event.TypeTurnStart {
			if m.Tenant != "acme" || m.Principal != "alice" {
				t.Fatalf("%s: meta %+v, want acme/alice", e.Type, m)
			}
		}
		sawCodeRun = sawCodeRun || e.Type == code.TypeRun
	}
	if !sawCodeRun {
		t.Fatal("no code_run event reached the file")
	}

	without := filepath.Join(dir, "without.ndjson")
	if _, _, err := cli(t, context.Background(), "", "run", "--runner", "interpreter", "--events", without, "print(6*7)"); err != nil {
		t.Fatal(err)
	}
	auditClean(t, without, 1)
	for _, e := range readEvents(t, without) {
		if e.Meta.Tenant != "" || e.Meta.Principal != "" || e.Meta.SessionID != "" {
			t.Fatalf("%s: meta %+v; nothing was given, so nothing may appear", e.Type, e.Meta)
		}
	}
	b, _ := os.ReadFile(without)
	if bytes.Contains(b, []byte(`"tenant"`)) || bytes.Contains(b, []byte("print(6*7)")) {
		t.Fatal("the events file holds a tenant nobody gave, or the code itself")
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "exactly one MESSAGE"},
		{[]string{"run", "a", "b"}, "exactly one MESSAGE"},
		{[]string{"run", "  "}, "MESSAGE is empty"},
		{[]string{"run", "--model", "gpt", "x"}, "anthropic:MODEL"},
		{[]string{"run", "--model", "anthropic:claude-sonnet-4-5", "x"}, "ANTHROPIC_API_KEY"},
		{[]string{"run", "--runner", "docker", "x"}, "process, interpreter or jail"},
		{[]string{"run", "--tenant", "a b", "x"}, "--tenant"},
		{[]string{"run", "--principal", "bad\x01", "x"}, "--principal"},
		{[]string{"run", "--frobnicate", "x"}, "unknown flag"},
	} {
		_, _, err := cli(t, context.Background(), "", c.args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: exit %d, %v; want 2 naming %q", c.args, exitCode(err), err, c.want)
		}
	}
}

// A run that fails exits 1 with one line that says why.
func TestRunFailedRunExits1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: the connection is refused
	t.Setenv("OPENAI_BASE_URL", "http://"+addr+"/v1")
	t.Setenv("OPENAI_API_KEY", "")
	out, _, err := cli(t, context.Background(), "", "run", "--runner", "process", "--model", "openai:gpt-4o-mini", "what is 6*7?")
	if exitCode(err) != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q, %v", exitCode(err), out, err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "run failed") || !strings.Contains(msg, "start") {
		t.Fatalf("the reason should be one line saying to start the server: %q", msg)
	}

	out, _, err = cli(t, context.Background(), "", "run", "--runner", "process", "--json", "--model", "openai:gpt-4o-mini", "what is 6*7?")
	var r runResult
	if exitCode(err) != 1 || json.Unmarshal([]byte(out), &r) != nil || r.Error == "" || !strings.HasPrefix(r.RunID, "run-") {
		t.Fatalf("--json on a failed run: exit %d, %q", exitCode(err), out)
	}
}

// --model openai: and anthropic: through their wire formats, to a local
// server whose model asks for run_code and answers with its output.
func TestRunThroughVendorWire(t *testing.T) {
	needPython(t)
	oa := modelwire.NewOpenAI(modelwire.Options{APIKey: "sk-local"})
	defer oa.Close()
	an := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-local"})
	defer an.Close()
	t.Setenv("OPENAI_BASE_URL", oa.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-local")
	t.Setenv("ANTHROPIC_BASE_URL", an.URL)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-local")
	for _, c := range []struct {
		model string
		srv   *modelwire.Server
	}{{"openai:gpt-4o-mini", oa}, {"anthropic:claude-sonnet-4-5", an}} {
		events := filepath.Join(t.TempDir(), "e.ndjson")
		out, errout, err := cli(t, context.Background(), "", "run", "--runner", "interpreter", "--events", events, "--model", c.model, "What is 6*7?")
		if err != nil || out != "run_code printed: 42\n" {
			t.Fatalf("%s: %q, %v\n%s", c.model, out, err, errout)
		}
		reqs := c.srv.Requests()
		if len(reqs) != 2 || len(reqs[1].ToolResults) != 1 || reqs[1].ToolResults[0] != "42" {
			t.Fatalf("%s: requests %+v", c.model, reqs)
		}
		if !strings.Contains(string(reqs[0].Body), "run_code tool") { // the system prompt
			t.Fatalf("%s: the system prompt did not travel: %s", c.model, reqs[0].Body)
		}
		auditClean(t, events, 1)
	}
}

func TestRunCheckIns(t *testing.T) {
	needPython(t)
	ctx := context.Background()
	out, errout, err := cli(t, ctx, "", "run", "--runner", "interpreter", "--ask", "--approve", "print(6*7)")
	if err != nil || out != "42\n" || !strings.Contains(errout, `"run_code"`) {
		t.Fatalf("--ask --approve: %q, %v, %q", out, err, errout)
	}
	// Not a terminal, no --approve: declined with a note, not a hang.
	out, errout, err = cli(t, ctx, "", "run", "--runner", "interpreter", "--ask", "--json", "print(6*7)")
	var r runResult
	if err != nil || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("--ask without a terminal: %v\n%s", err, out)
	}
	if len(r.CheckIns) != 1 || r.CheckIns[0].Approved || !strings.Contains(r.CheckIns[0].Note, "--approve") ||
		!strings.Contains(r.Output, "declined") || strings.Contains(r.Output, "42") || !strings.Contains(errout, "not a terminal") {
		t.Fatalf("declined check-in: %+v\nstderr %s", r, errout)
	}

	// A terminal: the person's answer decides.
	saved := terminalIn
	terminalIn = func(io.Reader) bool { return true }
	defer func() { terminalIn = saved }()
	for _, c := range []struct {
		answer string
		want   string
	}{{"y\n", "42\n"}, {"YES\n", "42\n"}, {"n\n", "declined at the terminal"}, {"\n", "declined"}, {"", "declined"}} {
		out, errout, err := cli(t, ctx, c.answer, "run", "--runner", "interpreter", "--ask", "print(6*7)")
		if err != nil || !strings.Contains(out, c.want) || !strings.Contains(errout, "Approve? [y/N]") {
			t.Fatalf("answer %q: %q, %v, %q", c.answer, out, err, errout)
		}
	}
}

// A signal (here: the root context cancelled, as the signal handler does)
// while code runs stops the turn, closes the interpreter and exits 1.
func TestRunInterruptClosesToolSessions(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "e.ndjson")
	prog := "import os, time\nf = open(" + strconv.Quote(fifo) + ", 'w'); f.write(str(os.getpid())); f.close()\ntime.sleep(120)\nprint('never')"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		out, errout string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		out, errout, err := cli(t, ctx, "", "run", "--runner", "interpreter", "--events", events, prog)
		done <- result{out, errout, err}
	}()
	b, err := os.ReadFile(fifo) // returns once the code has written its pid and closed
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("pid %q: %v", b, err)
	}
	cancel()
	r := <-done
	if exitCode(r.err) != 1 || r.out != "" || !strings.Contains(r.err.Error(), "interrupted") || strings.Contains(r.err.Error(), "\n") {
		t.Fatalf("exit %d, %q, %v", exitCode(r.err), r.out, r.err)
	}
	if !strings.Contains(r.errout, "closing its tool sessions") {
		t.Fatalf("stderr: %q", r.errout)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the interpreter (pid %d) outlived the command: %v", pid, err)
	}
	auditClean(t, events, 1)
}
