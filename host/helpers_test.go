package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ---- stores: the same tests run against SQLite and PostgreSQL ----

type storeKind struct {
	name string
	// open returns a DSN for a fresh, empty store; the same DSN opens the
	// same store again (a restart).
	dsn func(t *testing.T) string
}

// stores lists SQLite always, and PostgreSQL when AGENTRY_TEST_POSTGRES
// names a server. Under CI=true a missing server fails the test instead of
// skipping it.
func stores(t *testing.T) []storeKind {
	t.Helper()
	kinds := []storeKind{{name: "sqlite", dsn: func(t *testing.T) string {
		return filepath.Join(t.TempDir(), "agentry.db")
	}}}
	pg := os.Getenv("AGENTRY_TEST_POSTGRES")
	if pg == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("AGENTRY_TEST_POSTGRES is unset under CI=true: run .ci/postgres and export the DSN it prints")
		}
		t.Log("SKIPPING the PostgreSQL half of this test: AGENTRY_TEST_POSTGRES is unset (run .ci/postgres to get a DSN)")
		return kinds
	}
	return append(kinds, storeKind{name: "postgres", dsn: func(t *testing.T) string { return pgtest.Schema(t, pg) }})
}

func openStore(t *testing.T, dsn string) *sqlstore.Store {
	t.Helper()
	var s *sqlstore.Store
	var err error
	if strings.HasPrefix(dsn, "postgres://") {
		s, err = postgres.Open(context.Background(), dsn)
	} else {
		s, err = sqlite.Open(context.Background(), dsn)
	}
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	return s
}

// ---- a model that does what the message says ----

// cmdModel is an offline model driven by the person's message:
//
//	call <tool> <json args>   calls the tool, then answers with its result
//	fail                      the model errors
//	anything else             answers "you said: <message>"
//
// It reuses the tool-call id "c1" in every conversation, as some real
// models do.
type cmdModel struct{}

func (cmdModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == llm.RoleTool {
		return llm.Response{Text: "tool said: " + last.Content, StopReason: llm.StopEnd}, nil
	}
	msg := last.Content
	if rest, ok := strings.CutPrefix(msg, "call "); ok {
		name, args, _ := strings.Cut(rest, " ")
		if args == "" {
			args = "{}"
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: name, Args: json.RawMessage(args)}}, StopReason: llm.StopToolUse}, nil
	}
	if msg == "fail" {
		return llm.Response{}, errors.New("the model is down")
	}
	if msg == "what came before?" && len(req.Messages) > 1 {
		prev := req.Messages[len(req.Messages)-2]
		return llm.Response{Text: "before: " + string(prev.Role) + ": " + prev.Content, StopReason: llm.StopEnd}, nil
	}
	return llm.Response{Text: "you said: " + msg, StopReason: llm.StopEnd}, nil
}

// ---- tools that hold real resources ----

// workspaces is a real resource: a scratch directory per isolation key,
// created on first use and removed by its teardown. Closing one twice is
// an error, so exactly-once is checked by the resource itself.
type workspaces struct {
	root string

	mu     sync.Mutex
	open   map[string]*workspace
	opened int
	closed int
}

type workspace struct {
	dir    string
	closed bool
}

func newWorkspaces(t *testing.T) *workspaces {
	return &workspaces{root: t.TempDir(), open: map[string]*workspace{}}
}

func (w *workspaces) use(c *tool.Call, scope toolsession.Scope) (string, error) {
	key, err := c.Key(scope)
	if err != nil {
		return "", err
	}
	fresh := &workspace{}
	cleanup := func(context.Context) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if fresh.closed {
			return errors.New("workspace closed twice")
		}
		fresh.closed = true
		if w.open[key] == fresh {
			delete(w.open, key)
		}
		w.closed++
		return os.RemoveAll(fresh.dir)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out, err := c.OnTeardown(cleanup, toolsession.Options{Scope: scope, Key: key, RunnerID: "tempdir", Label: "files"})
	if err != nil {
		return "", err
	}
	ws := w.open[key]
	if !out.Reused || ws == nil {
		dir, err := os.MkdirTemp(w.root, "ws-")
		if err != nil {
			return "", err
		}
		fresh.dir = dir
		ws = fresh
		w.open[key] = ws
		w.opened++
	}
	return ws.dir, nil
}

func (w *workspaces) stats() (open, opened, closed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.open), w.opened, w.closed
}

type fileArgs struct {
	Op   string `json:"op" jsonschema:"write or read"`
	Name string `json:"name"`
	Text string `json:"text,omitempty"`
}

// filesTool reads and writes files in the caller's workspace (one per
// conversation: scope session).
func (w *workspaces) filesTool() tool.Tool {
	return tool.Func("files", "reads and writes files in a private workspace", func(ctx context.Context, c *tool.Call, in fileArgs) (string, error) {
		dir, err := w.use(c, toolsession.ScopeSession)
		if err != nil {
			return "", err
		}
		p := filepath.Join(dir, filepath.Base(in.Name))
		switch in.Op {
		case "write":
			return "wrote " + in.Name, os.WriteFile(p, []byte(in.Text), 0o600)
		case "read":
			b, err := os.ReadFile(p)
			if errors.Is(err, os.ErrNotExist) {
				return "no such file", nil
			}
			return string(b), err
		}
		return "", fmt.Errorf("unknown op %q", in.Op)
	})
}

type deployArgs struct {
	Target string `json:"target"`
}

// deployTool must be approved before every call; it opens a run-scoped
// workspace, so a pause holds a live session.
func (w *workspaces) deployTool() tool.Tool {
	return tool.WithCheckIn(tool.Func("deploy", "deploys", func(ctx context.Context, c *tool.Call, in deployArgs) (string, error) {
		if _, err := w.use(c, toolsession.ScopeRun); err != nil {
			return "", err
		}
		return "deployed " + in.Target, nil
	}))
}

type askArgs struct{}

// askTool opens a run-scoped workspace and then asks a person mid-call, so
// the pause holds a live tool session until it is answered or abandoned.
func (w *workspaces) askTool() tool.Tool {
	return tool.Func("migrate", "migrates", func(ctx context.Context, c *tool.Call, _ askArgs) (string, error) {
		if _, err := w.use(c, toolsession.ScopeRun); err != nil {
			return "", err
		}
		if _, ok := tool.ApprovalFrom(ctx); ok {
			return "migrated", nil
		}
		return "", tool.CheckIn("drop the old table?")
	})
}

// gate holds a turn inside a tool until the test releases it: the tool
// opens a run-scoped workspace, says it has entered, and waits.
type gate struct {
	entered chan struct{}
	release chan struct{}
	// stopped hears when a waiting call was stopped (its context ended),
	// the moment a cut reached the tool.
	stopped chan time.Time
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 64), release: make(chan struct{}), stopped: make(chan time.Time, 64)}
}

func (g *gate) tool(w *workspaces) tool.Tool {
	return tool.Func("gate", "waits", func(ctx context.Context, c *tool.Call, _ askArgs) (string, error) {
		if _, err := w.use(c, toolsession.ScopeRun); err != nil {
			return "", err
		}
		g.entered <- struct{}{}
		select {
		case <-g.release:
			return "released", nil
		case <-ctx.Done():
			g.stopped <- time.Now()
			return "", context.Cause(ctx)
		}
	})
}

// heldTool is gate's tool as a tool that pins its session: it holds a
// lease on its run-scoped workspace while it waits, so the session is
// busy, never evicted, and a new one past the bound waits for room.
func (g *gate) heldTool(w *workspaces) tool.Tool {
	return tool.Func("held", "waits, holding its session", func(ctx context.Context, c *tool.Call, _ askArgs) (string, error) {
		key, err := c.Key(toolsession.ScopeRun)
		if err != nil {
			return "", err
		}
		lease, err := c.Hold(ctx, toolsession.Options{Scope: toolsession.ScopeRun, Key: key, RunnerID: "tempdir", Label: "files"})
		if err != nil {
			return "", err
		}
		defer lease.Release()
		if _, err := w.use(c, toolsession.ScopeRun); err != nil {
			return "", err
		}
		g.entered <- struct{}{}
		select {
		case <-g.release:
			return "released", nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	})
}

// recorder is an in-memory event sink.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
	more   chan struct{} // a token after each event
}

func newRecorder() *recorder { return &recorder{more: make(chan struct{}, 1)} }

func (r *recorder) Export(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
}

// waitFor blocks until an event of type t for which ok holds has arrived,
// or fails after d.
func (r *recorder) waitFor(tb testing.TB, t event.Type, ok func(event.Event) bool, d time.Duration) {
	tb.Helper()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for !slices.ContainsFunc(r.ofType(t), ok) {
		select {
		case <-r.more:
		case <-timeout.C:
			tb.Fatalf("no %s event within %s", t, d)
		}
	}
}
func (r *recorder) Flush(context.Context) error { return nil }
func (r *recorder) Close(context.Context) error { return nil }

func (r *recorder) ofType(t event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// ---- the fixture: a host on a store, over HTTP ----

// The host is tested on two providers: provider/native (an agentry agent
// with real tools) and the conformance kit's fake, which proves the host
// needs nothing a provider does not declare.
const (
	onNative = "native"
	onFake   = "fake"
)

type fixture struct {
	t      *testing.T
	kind   string
	h      *host.Host
	reg    *provider.Registry
	bus    *event.Bus
	url    string
	store  *sqlstore.Store
	dsn    string
	ws     *workspaces
	gate   *gate
	rec    *recorder
	tokens map[string]string // name → bearer token
	stop   func()
	closed bool
	// keepReg leaves the registry open at shutdown, for a next host.
	keepReg bool
	// door stands in front of a replica's handler (replica tests only).
	door *door
}

type config struct {
	kind     string // onNative (default) or onFake
	dsn      string
	opt      host.Options
	real     bool // a real listener instead of httptest
	ws       *workspaces
	tokens   map[string]string // reuse these tokens (a restart)
	tools    []tool.Tool       // more tools for the agent
	reg      *provider.Registry
	keepReg  bool            // leave the registry open at shutdown (the fake's conversations live in it)
	provider provider.Driver // another driver than native or the fake
	agentOpt func(*agent.Options)
	auth     host.Authenticator // beside the tokens file, in a Chain
	credKeys *host.Keyring      // keep credentials in the fixture's store, sealed with these
}

var owners = map[string]tool.Identity{
	"alice": {Tenant: "acme", Principal: "alice"},
	"bob":   {Tenant: "acme", Principal: "bob"},
	"carol": {Tenant: "globex", Principal: "alice"}, // the same principal name in another tenant
	"root":  {Tenant: "acme", Principal: "root"},    // an admin of acme (admins)
	"boss":  {Tenant: "globex", Principal: "boss"},  // an admin of globex
}

// admins are the owners whose tokens carry role=admin.
var admins = map[string]bool{"root": true, "boss": true}

// tokensFor admits the given tokens, or new ones for every owner.
func tokensFor(t *testing.T, toks map[string]string) (*host.Tokens, map[string]string) {
	t.Helper()
	var file strings.Builder
	if toks == nil {
		toks = map[string]string{}
		for name, o := range owners {
			tok, _, err := host.GenerateToken(o)
			if err != nil {
				t.Fatal(err)
			}
			toks[name] = tok
		}
	}
	for name, tok := range toks {
		file.WriteString(host.TokenLine(tok, owners[name]))
		if admins[name] {
			file.WriteString(" role=admin")
		}
		file.WriteString("\n")
	}
	auth, err := host.ParseTokens(strings.NewReader(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	return auth, toks
}

func newFixture(t *testing.T, cfg config) *fixture {
	t.Helper()
	if cfg.kind == "" {
		cfg.kind = onNative
	}
	if cfg.dsn == "" {
		cfg.dsn = filepath.Join(t.TempDir(), "agentry.db")
	}
	ws := cfg.ws
	if ws == nil {
		ws = newWorkspaces(t)
	}
	g := newGate()
	rec := newRecorder()
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(rec, event.Filter{Tier: event.TierFull}); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, cfg.dsn)
	reg := cfg.reg
	if reg == nil {
		var d provider.Driver
		def := provider.Definition{ID: "agents"}
		switch {
		case cfg.provider != nil:
			d = cfg.provider
		case cfg.kind == onFake:
			d = conformance.NewFakeDriver()
		default:
			tools := append([]tool.Tool{ws.filesTool(), ws.deployTool(), ws.askTool(), g.tool(ws), g.heldTool(ws)}, cfg.tools...)
			agentOpt := cfg.agentOpt
			nd, err := native.NewDriver(native.Config{
				TurnRunIDs: true,
				Store:      native.HostStore(st),
				Agent: func(context.Context, provider.Definition) (agent.Options, error) {
					o := agent.Options{
						ID:     "host-test",
						Model:  cmdModel{},
						Tools:  tools,
						Routes: []agent.Route{{Sink: bus, Filter: event.Filter{Tier: event.TierFull}}},
					}
					if agentOpt != nil {
						agentOpt(&o)
					}
					return o, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			d = nd
		}
		def.Provider = d.ProviderKey()
		var err error
		reg, err = provider.OpenRegistry(context.Background(), []provider.Driver{d}, []provider.Definition{def}, provider.WithEvents(bus.Export))
		if err != nil {
			t.Fatal(err)
		}
	}
	inst, err := reg.Instance("agents")
	if err != nil {
		t.Fatal(err)
	}
	auth, toks := tokensFor(t, cfg.tokens)
	opt := cfg.opt
	opt.Provider, opt.Store, opt.Auth, opt.Bus = inst, st, auth, bus
	if cfg.auth != nil {
		opt.Auth = host.Chain{auth, cfg.auth}
	}
	if cfg.credKeys != nil {
		opt.Credentials, opt.CredentialKeys = st, cfg.credKeys
	}
	if opt.EvictEvery == 0 {
		opt.EvictEvery = -1
	}
	if opt.RetentionEvery == 0 {
		opt.RetentionEvery = -1 // the retention tests call SweepClosed, or set it
	}
	h, err := host.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, kind: cfg.kind, h: h, reg: reg, bus: bus, store: st, dsn: cfg.dsn, ws: ws, gate: g, rec: rec, tokens: toks}
	f.keepReg = cfg.keepReg
	if cfg.real {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: validating(t, h), ReadHeaderTimeout: 5 * time.Second}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		f.url = "http://" + ln.Addr().String()
		f.stop = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
		}
	} else {
		srv := httptest.NewServer(validating(t, h))
		f.url = srv.URL
		f.stop = srv.Close
	}
	t.Cleanup(f.shutdown)
	return f
}

// answer is what the fixture's provider answers to a plain message.
func (f *fixture) answer(msg string) string {
	if f.kind == onFake {
		return "echo: " + msg
	}
	return "you said: " + msg
}

// askPrompt is a message that makes the provider raise an approval.
func (f *fixture) askPrompt() string {
	if f.kind == onFake {
		return conformance.FakeAsk
	}
	return `call deploy {"target":"prod"}`
}

// liveTools counts the tool sessions the events say are open.
func (f *fixture) liveTools() int {
	return len(f.rec.ofType(tool.TypeSessionStarted)) - len(f.rec.ofType(tool.TypeSessionClosed)) - len(f.rec.ofType(tool.TypeSessionCloseFailed))
}

// eachProvider runs a test on the native provider and on the fake.
func eachProvider(t *testing.T, run func(t *testing.T, kind string)) {
	for _, kind := range []string{onNative, onFake} {
		t.Run(kind, func(t *testing.T) { run(t, kind) })
	}
}

// shutdown stops the host and the server (once).
func (f *fixture) shutdown() {
	if f.closed {
		return
	}
	f.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.h.Shutdown(ctx); err != nil {
		f.t.Errorf("host shutdown: %v", err)
	}
	f.stop()
	if f.reg != nil && !f.keepReg {
		if err := f.reg.Dispose(ctx); err != nil {
			f.t.Errorf("disposing the providers: %v", err)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("status %d: body is not JSON: %v\n%s", r.status, err, r.body)
	}
	return m
}

// code returns error.code of an error body.
func (r resp) code(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	e, _ := m["error"].(map[string]any)
	if e == nil {
		t.Fatalf("status %d: no error object in %s", r.status, r.body)
	}
	c, _ := e["code"].(string)
	return c
}

func (f *fixture) do(method, path, who string, body any, hdr ...string) resp {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader: // of unknown length: sent chunked
		rd = b
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if who != "" {
		tok, ok := f.tokens[who]
		if !ok {
			tok = who // a raw token or header value under test
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func (f *fixture) open(who string) string {
	f.t.Helper()
	r := f.do("POST", "/v1/sessions", who, nil)
	if r.status != http.StatusCreated {
		f.t.Fatalf("open: %d %s", r.status, r.body)
	}
	id, _ := r.json(f.t)["sessionId"].(string)
	if id == "" {
		f.t.Fatalf("open: no sessionId in %s", r.body)
	}
	return id
}

func (f *fixture) say(who, id, msg string) resp {
	f.t.Helper()
	return f.do("POST", "/v1/sessions/"+id+"/turns", who, map[string]string{"message": msg})
}

func (f *fixture) decide(who, id string, approve bool) resp {
	f.t.Helper()
	return f.do("POST", "/v1/sessions/"+id+"/decision", who, map[string]any{"approve": approve})
}

func want(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if code != "" {
		if got := r.code(t); got != code {
			t.Fatalf("code %q, want %q: %s", got, code, r.body)
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, name string
	data     []byte
}

// readSSE reads a whole event stream.
func readSSE(t *testing.T, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != nil {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = append(cur.data, line[6:]...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the event stream: %v", err)
	}
	return out
}
