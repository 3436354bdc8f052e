package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// mcpRun is runMCP in a goroutine, with what it printed.
type mcpRun struct {
	stderr *syncBuffer
	done   chan error
	cancel context.CancelFunc
}

func startMCP(t *testing.T, o mcpOptions) *mcpRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &mcpRun{stderr: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- runMCP(ctx, o, r.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Error("runMCP did not return")
		}
	})
	return r
}

func (r *mcpRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		t.Fatalf("runMCP did not return; stderr:\n%s", r.stderr.String())
		return nil
	}
}

func callText(t *testing.T, cs *mcp.ClientSession, code string) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "agentry-test", Version: "0"}, nil)
}

// Over stdio (here an in-memory pipe in its place): run_code is listed,
// runs code in a fresh interpreter per call, and every interpreter closes
// when its call ends.
func TestMCPStdio(t *testing.T) {
	needPython(t)
	events := filepath.Join(t.TempDir(), "mcp.ndjson")
	serverT, clientT := mcp.NewInMemoryTransports()
	o := mcpOptions{runner: "interpreter", drain: 5 * time.Second, teardown: 5 * time.Second, transport: serverT}
	o.sinks.events = events
	r := startMCP(t, o)

	cs, err := newClient().Connect(context.Background(), clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "run_code" {
		t.Fatalf("tools: %+v, %v", tools, err)
	}
	if d := tools.Tools[0].Description; !strings.Contains(d, "Nothing persists between calls") {
		t.Fatalf("the description must say nothing persists: %q", d)
	}
	if out, isErr := callText(t, cs, "print(6*7)"); out != "42" || isErr {
		t.Fatalf("print(6*7): %q, error %v", out, isErr)
	}
	callText(t, cs, "x = 1")
	if out, isErr := callText(t, cs, "print(x)"); !isErr || !strings.Contains(out, "NameError") {
		t.Fatalf("a variable survived its call: %q", out)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("runMCP after the client left: %v\n%s", err, r.stderr.String())
	}
	rep := auditClean(t, events, 3)
	if got := rep.Tools[0].Closed["call-end"]; got != 3 || rep.Tools[0].Scope != "call" {
		t.Fatalf("closes %+v", rep.Tools[0])
	}
	for _, e := range readEvents(t, events) {
		if e.Meta.RunID != "" || e.Meta.SessionID != "" || e.Meta.Tenant != "" || e.Meta.Principal != "" {
			t.Fatalf("%s over stdio carries meta %+v; a served call has no run, session or identity", e.Type, e.Meta)
		}
	}
	if !strings.Contains(r.stderr.String(), "run_code runs in a persistent Python interpreter, UNJAILED") {
		t.Fatalf("stderr must say where the code runs:\n%s", r.stderr.String())
	}
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

func httpClient(url, token string) (*mcp.Client, mcp.Transport) {
	return newClient(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}}}
}

// Over HTTP with a tokens file: no token or a wrong one is refused; a good
// one proves its tenant and principal, which reach the tool (its events
// carry them). A signal stops the server cleanly.
func TestMCPHTTPWithTokens(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	const token = "agt_test-token-for-alice-0123456789"
	tokens := filepath.Join(dir, "tokens.txt")
	file := "# acme\n" + host.TokenLine(token, tool.Identity{Tenant: "acme", Principal: "alice"}) + "\n"
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "mcp.ndjson")
	addr := make(chan string, 1)
	o := mcpOptions{runner: "interpreter", http: "127.0.0.1:0", tokens: tokens, drain: 5 * time.Second, teardown: 5 * time.Second,
		listening: func(a string) { addr <- a }}
	o.sinks.events = events
	r := startMCP(t, o)
	url := "http://" + <-addr + "/mcp"

	for _, tok := range []string{"", "agt_wrong"} {
		c, tr := httpClient(url, tok)
		if cs, err := c.Connect(context.Background(), tr, nil); err == nil {
			cs.Close()
			t.Fatalf("token %q was let in", tok)
		}
		resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("no token: %d %v", resp.StatusCode, resp.Header)
		}
	}
	c, tr := httpClient(url, token)
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, isErr := callText(t, cs, "print(6*7)"); out != "42" || isErr {
		t.Fatalf("%q, %v", out, isErr)
	}
	cs.Close()
	r.cancel() // as SIGTERM does
	if err := r.wait(t); err != nil {
		t.Fatalf("stop: %v\n%s", err, r.stderr.String())
	}
	auditClean(t, events, 1)
	saw := 0
	for _, e := range readEvents(t, events) {
		if e.Type == code.TypeRun || e.Type == tool.TypeSessionStarted {
			saw++
			if e.Meta.Tenant != "acme" || e.Meta.Principal != "alice" {
				t.Fatalf("%s meta %+v, want the token's acme/alice", e.Type, e.Meta)
			}
		}
	}
	if saw != 2 {
		t.Fatalf("%d code_run/session_started events", saw)
	}
	if bytes.Contains([]byte(r.stderr.String()), []byte(token)) {
		t.Fatal("the token was printed")
	}
}

// Without --tokens, --http serves loopback callers, with no identity.
func TestMCPHTTPLoopbackWithoutTokens(t *testing.T) {
	needPython(t)
	addr := make(chan string, 1)
	r := startMCP(t, mcpOptions{runner: "process", http: "127.0.0.1:0", drain: time.Second, teardown: time.Second,
		listening: func(a string) { addr <- a }})
	c, tr := httpClient("http://"+<-addr+"/mcp", "")
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := callText(t, cs, "print(6*7)"); out != "42" {
		t.Fatalf("%q", out)
	}
	cs.Close()
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr.String(), "loopback only") {
		t.Fatalf("stderr:\n%s", r.stderr.String())
	}
}

func TestMCPUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("agt_plain-token acme alice\n"), 0o600)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("# nobody yet\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--tokens", bad}, "--tokens needs --http"},
		{[]string{"mcp", "--http", "0.0.0.0:8765"}, "without --tokens"},
		{[]string{"mcp", "--http", "8765"}, "not host:port"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--tokens", bad}, "sha256:"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--tokens", empty}, "admits nobody"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--tokens", filepath.Join(dir, "missing")}, "reading the tokens file"},
		{[]string{"mcp", "--runner", "docker"}, "process, interpreter or jail"},
		{[]string{"mcp", "--drain", "0s"}, "positive"},
		{[]string{"mcp", "extra"}, "unknown command"},
	} {
		_, _, err := cli(t, context.Background(), "", c.args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: exit %d, %v; want 2 naming %q", c.args, exitCode(err), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "agt_plain-token") {
			t.Errorf("%q: the error quotes a token: %v", c.args, err)
		}
	}
}

// A signal while a call runs: the call may finish within --drain, then is
// cancelled; its interpreter closes either way, and the command says what
// was cut.
func TestMCPSignalDuringACall(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "mcp.ndjson")
	serverT, clientT := mcp.NewInMemoryTransports()
	o := mcpOptions{runner: "interpreter", drain: 20 * time.Millisecond, teardown: 5 * time.Second, transport: serverT}
	o.sinks.events = events
	r := startMCP(t, o)
	cs, err := newClient().Connect(context.Background(), clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		prog := "import os, time\nf = open(" + strconv.Quote(fifo) + ", 'w'); f.write(str(os.getpid())); f.close()\ntime.sleep(120)"
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": prog}})
		got <- answer{res, err}
	}()
	b, err := os.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	r.cancel()
	err = r.wait(t)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("a drain that had to cut a call: %v", err)
	}
	if a := <-got; a.err == nil && !a.res.IsError {
		t.Fatalf("the cut call answered as if it finished: %+v", a.res)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the interpreter (pid %d) outlived the server: %v", pid, err)
	}
	auditClean(t, events, 1)
}
