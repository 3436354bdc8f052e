package durable_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

func TestMain(m *testing.M) {
	if os.Getenv("AGENTRY_DURABLE_CHILD") != "" {
		os.Exit(childReplica())
	}
	goleak.VerifyTestMain(m)
}

func dial(t testing.TB, addr string) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: addr, Logger: quiet{}})
	if err != nil {
		t.Fatalf("dialing Temporal at %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// quiet drops the SDK's logging.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

// uniq makes task queue names no other test shares.
func uniq(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

// toucher is the model of these tests, a pure function of the
// conversation (so any replica, before or after a restart, answers the
// same): for a message "touch a,b,c" it calls the tool touch once per
// word, one call per model step, then answers with every tool result of
// the turn joined by " | ".
type toucher struct {
	mu    sync.Mutex
	calls int
	last  llm.Request
}

func (m *toucher) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.calls++
	m.last = req
	m.mu.Unlock()
	start := 0
	for i, msg := range req.Messages {
		if msg.Role == llm.RoleUser {
			start = i
		}
	}
	words := strings.Split(strings.TrimPrefix(req.Messages[start].Content, "touch "), ",")
	var results []string
	for _, msg := range req.Messages[start:] {
		if msg.Role == llm.RoleTool {
			results = append(results, msg.Content)
		}
	}
	if !strings.HasPrefix(req.Messages[start].Content, "touch ") || len(results) == len(words) {
		return llm.Response{Text: "done: " + strings.Join(results, " | "), StopReason: llm.StopEnd}, nil
	}
	n := len(results)
	args, _ := json.Marshal(map[string]string{"word": words[n]})
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("call-%d", n), Name: "touch", Args: args}}, StopReason: llm.StopToolUse}, nil
}

// touchTool appends its word to a file (the side effect whose count the
// tests check) and answers "touched WORD". The word "hang" is appended and
// then the call waits for its context: a call in flight when its worker
// dies.
func touchTool(path string, checkIn bool, onHang func()) tool.Tool {
	type in struct {
		Word string `json:"word"`
	}
	t := tool.Func("touch", "Append a word to the file.", func(ctx context.Context, _ *tool.Call, a in) (string, error) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return "", err
		}
		_, err = fmt.Fprintln(f, a.Word)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		if a.Word == "hang" {
			if onHang != nil {
				onHang()
			}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "touched " + a.Word, nil
	})
	if checkIn {
		return tool.WithCheckIn(t)
	}
	return t
}

type replica struct {
	reg  *provider.Registry
	inst *provider.Instance
}

func openReplica(t testing.TB, c client.Client, cfg durable.Config) *replica {
	t.Helper()
	cfg.Client = c
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	reg, inst, err := durable.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("opening the durable instance: %v", err)
	}
	r := &replica{reg: reg, inst: inst}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// touchReplica serves a replica ("r1", on a task queue of its own, its
// sessions in memory) whose model is given the touch tool on a file of
// its own; it returns the replica and the file.
func touchReplica(t *testing.T, c client.Client, model llm.Model, checkIn bool) (*replica, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "touched")
	r := openReplica(t, c, durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: model,
		Tools: []tool.Tool{touchTool(file, checkIn, nil)}, Store: native.NewMemoryStore(0)})
	return r, file
}

// openS1 opens session "s1" on r in a working directory of its own; it
// is closed when the test ends, before r stops.
func openS1(t *testing.T, r *replica) provider.Session {
	t.Helper()
	ctx := context.Background()
	s, err := r.inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "s1", WorkingDirectory: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx, provider.CloseRequested) })
	return s
}

func (r *replica) stop(t testing.TB) {
	if r.reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.reg.Dispose(ctx); err != nil {
		t.Errorf("disposing: %v", err)
	}
	r.reg = nil
}

// collect pulls a turn's outputs.
func collect(t *testing.T, seq func(func(provider.Output, error) bool)) []provider.Output {
	t.Helper()
	var outs []provider.Output
	for o, err := range seq {
		if err != nil {
			t.Fatalf("turn: %v (after %v)", err, outs)
		}
		outs = append(outs, o)
	}
	return outs
}

func last(outs []provider.Output) provider.Output {
	if len(outs) == 0 {
		return provider.Output{}
	}
	return outs[len(outs)-1]
}

func textOf(outs []provider.Output) string {
	var b strings.Builder
	for _, o := range outs {
		if o.Kind == provider.OutputText {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(raw))
}

// childReplica is a replica in a process of its own, for the tests that
// kill one: it runs the queues named in its environment until killed.
func childReplica() int {
	c, err := client.Dial(client.Options{HostPort: os.Getenv("AGENTRY_TEST_TEMPORAL"), Logger: quiet{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	// The child's store is its own and stays empty: the test that runs
	// it writes the conversation only after the child is gone.
	_, _, err = durable.Open(context.Background(), durable.Config{
		Client: c, TaskQueue: os.Getenv("AGENTRY_DURABLE_QUEUE"), Replica: os.Getenv("AGENTRY_DURABLE_REPLICA"),
		Model: &toucher{}, Tools: []tool.Tool{touchTool(os.Getenv("AGENTRY_DURABLE_FILE"), false, func() { fmt.Println("hanging") })},
		Store: native.NewMemoryStore(0), Heartbeat: 2 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// caller is a model for the tests of what a turn shows: "call NAME ARGS"
// says "calling NAME" and calls the tool NAME with ARGS (JSON); a tool
// result is answered with "the tool said: RESULT". Anything else is
// echoed.
type caller struct {
	mu   sync.Mutex
	seen []llm.Request
}

func (m *caller) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req)
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	if last.Role == llm.RoleTool {
		return llm.Response{Text: "the tool said: " + last.Content, StopReason: llm.StopEnd}, nil
	}
	if rest, ok := strings.CutPrefix(last.Content, "call "); ok {
		name, args, _ := strings.Cut(rest, " ")
		if args == "" {
			args = "{}"
		}
		return llm.Response{Text: "calling " + name, StopReason: llm.StopToolUse,
			ToolCalls: []llm.ToolCall{{ID: "c1", Name: name, Args: json.RawMessage(args)}}}, nil
	}
	return llm.Response{Text: "echo: " + last.Content, StopReason: llm.StopEnd}, nil
}

func (m *caller) requests() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]llm.Request(nil), m.seen...)
}

// gate is a tool that says it was entered, then waits for the test to
// open it (or for its context).
type gate struct {
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 1), open: make(chan struct{})} }

func (g *gate) tool() tool.Tool {
	return tool.Func("gate", "waits until the test opens it", func(ctx context.Context, _ *tool.Call, _ struct{}) (string, error) {
		g.entered <- struct{}{}
		select {
		case <-g.open:
			return "opened", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
}

// touchDefs offer the tool touch to the model, for the tests that start a
// turn's workflow themselves.
var touchDefs = []llm.ToolDef{{Name: "touch", InputSchema: json.RawMessage(`{"type":"object"}`)}}
