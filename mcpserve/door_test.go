package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

type sessArgs struct {
	Scope string `json:"scope,omitempty" jsonschema:"teardown scope to ask for"`
	Mode  string `json:"mode,omitempty" jsonschema:"how the call ends"`
}

// sessionTool opens a pretend session on every call and registers its
// cleanup with the door; Mode says how the call then ends.
type sessionTool struct {
	closes   atomic.Int32
	cleanup  func(context.Context) error // nil: count and succeed
	started  chan struct{}               // signalled when a blocking call is running
	observed chan error                  // what a blocking call saw as the cause of its end
}

func newSessionTool() *sessionTool {
	return &sessionTool{started: make(chan struct{}, 16), observed: make(chan error, 16)}
}

func (st *sessionTool) tool() tool.Tool {
	return tool.Func("session", "holds a session for one call", func(ctx context.Context, c *tool.Call, a sessArgs) (tool.Result, error) {
		opt := toolsession.Options{Scope: toolsession.Scope(a.Scope), RunnerID: "test-runner", Label: "scratch"}
		if opt.Scope == "" {
			opt.Scope = toolsession.ScopeCall
		}
		cleanup := func(ctx context.Context) error {
			st.closes.Add(1)
			if st.cleanup != nil {
				return st.cleanup(ctx)
			}
			return nil
		}
		if _, err := c.OnTeardown(cleanup, opt); err != nil {
			return tool.Result{}, err
		}
		switch a.Mode {
		case "error":
			return tool.Result{}, errors.New("the sandbox said no")
		case "result-error":
			return tool.Result{Content: "the code exited 1", IsError: true}, nil
		case "panic":
			panic("the sandbox fell over")
		case "twice":
			out, err := c.OnTeardown(cleanup, opt)
			if err != nil {
				return tool.Result{}, err
			}
			return tool.Result{Content: fmt.Sprintf("reused=%v calls=%d", out.Reused, out.Calls)}, nil
		case "block":
			st.started <- struct{}{}
			<-ctx.Done()
			st.observed <- context.Cause(ctx)
			return tool.Result{}, context.Cause(ctx)
		}
		return tool.Result{Content: "done"}, nil
	})
}

func TestListToolsWithSchemas(t *testing.T) {
	t.Parallel()
	st := newSessionTool()
	tools := []tool.Tool{probe(), st.tool()}
	s := newServer(t, tools, mcpserve.Options{})
	cs := connect(t, s)

	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(res.Tools); got != 2 {
		t.Fatalf("listed %d tools, want 2", got)
	}
	for _, want := range tools {
		spec := want.Spec()
		i := slices.IndexFunc(res.Tools, func(x *mcp.Tool) bool { return x.Name == spec.Name })
		if i < 0 {
			t.Fatalf("tool %s is not listed", spec.Name)
		}
		got := res.Tools[i]
		if got.Description != spec.Description {
			t.Errorf("%s: description %q, want %q", spec.Name, got.Description, spec.Description)
		}
		var wantSchema any
		if err := json.Unmarshal(spec.InputSchema, &wantSchema); err != nil {
			t.Fatal(err)
		}
		gotJSON, _ := json.Marshal(got.InputSchema)
		var gotSchema any
		_ = json.Unmarshal(gotJSON, &gotSchema)
		if !reflect.DeepEqual(gotSchema, wantSchema) {
			t.Errorf("%s: schema %s, want %s", spec.Name, gotJSON, spec.InputSchema)
		}
	}
	if got := s.Tools(); !slices.Equal(got, []string{"probe", "session"}) {
		t.Errorf("Tools() = %v", got)
	}
}

func TestServedCallIsOneCall(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	cs := connect(t, s)

	a := decodeSeen(t, call(t, cs, "probe", nil))
	b := decodeSeen(t, call(t, cs, "probe", map[string]any{}))
	for _, got := range []seen{a, b} {
		if !strings.HasPrefix(got.ToolCallID, "mcp-") || len(got.ToolCallID) != len("mcp-")+32 {
			t.Errorf("tool call id %q is not a fresh mcp- id", got.ToolCallID)
		}
		if got.RunID != "" || got.SessionID != "" {
			t.Errorf("run %q, session %q: a served call has neither", got.RunID, got.SessionID)
		}
		if got.Identity != nil {
			t.Errorf("identity %+v over in-memory transport: nobody proved one", got.Identity)
		}
		if !slices.Equal(got.Scopes, []toolsession.Scope{toolsession.ScopeCall}) {
			t.Errorf("scopes %v, want [call]", got.Scopes)
		}
	}
	if a.ToolCallID == b.ToolCallID {
		t.Errorf("two calls share the id %q", a.ToolCallID)
	}
	if s.Tier() != nil {
		t.Error("a tier was built though no tool registered a cleanup")
	}
}

func TestWiderScopeRefusedByName(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	for _, scope := range []string{"run", "session", "shutdown"} {
		res := call(t, cs, "session", map[string]any{"scope": scope})
		if !res.IsError {
			t.Fatalf("scope %s: the call succeeded: %s", scope, text(t, res))
		}
		msg := text(t, res)
		if !strings.Contains(msg, fmt.Sprintf("%q", scope)) || !strings.Contains(msg, "[call]") {
			t.Errorf("scope %s: %q does not name the scope and [call]", scope, msg)
		}
	}
	if n := st.closes.Load(); n != 0 {
		t.Errorf("%d cleanups ran for refused registrations", n)
	}
	if s.Tier() != nil {
		t.Error("refused registrations built a tier")
	}
	ends := rec.ofType(tool.TypeCallEnd)
	if len(ends) != 3 {
		t.Fatalf("%d tool_end events, want 3", len(ends))
	}
	for _, e := range ends {
		if p := e.Payload.(*tool.CallEnd); !p.IsError || p.ErrorClass != "declined" {
			t.Errorf("tool_end %+v, want an error of class declined", p)
		}
	}
}

func TestCallCleanupFiresOnceWhenTheCallSettles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    string
		isError bool
		text    string
	}{
		{mode: "", text: "done"},
		{mode: "error", isError: true, text: "the sandbox said no"},
		{mode: "result-error", isError: true, text: "the code exited 1"},
		{mode: "panic", isError: true, text: "panicked"},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			t.Parallel()
			rec := newRecorder()
			st := newSessionTool()
			s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{}))
			cs := connect(t, s)

			res := call(t, cs, "session", map[string]any{"mode": tc.mode})
			if res.IsError != tc.isError || !strings.Contains(text(t, res), tc.text) {
				t.Errorf("result isError=%v %q, want isError=%v containing %q", res.IsError, text(t, res), tc.isError, tc.text)
			}
			// The door fires before it answers: no waiting needed.
			if n := st.closes.Load(); n != 1 {
				t.Fatalf("cleanup ran %d times by the time the result arrived, want 1", n)
			}
			reps := rec.allReports()
			if len(reps) != 1 || reps[0].Failed || reps[0].Reason != toolsession.ReasonCallEnd || reps[0].Scope != toolsession.ScopeCall {
				t.Fatalf("reports %+v, want one successful call-end close", reps)
			}
			if reps[0].RunID != "" || reps[0].SessionID != "" {
				t.Errorf("report carries run %q session %q", reps[0].RunID, reps[0].SessionID)
			}
			started, closed := rec.ofType(tool.TypeSessionStarted), rec.ofType(tool.TypeSessionClosed)
			if len(started) != 1 || len(closed) != 1 {
				t.Fatalf("%d started, %d closed events, want 1 and 1", len(started), len(closed))
			}
			sp, cp := started[0].Payload.(*tool.SessionOpened), closed[0].Payload.(*tool.SessionClosed)
			if sp.KeyHash == "" || sp.KeyHash != cp.KeyHash || cp.Reason != "call-end" || sp.RunnerID != "test-runner" {
				t.Errorf("started %+v closed %+v", sp, cp)
			}
			if s.Tier().Live() != 0 {
				t.Errorf("%d sessions still live", s.Tier().Live())
			}
			// Shutdown finds nothing left to fire.
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := st.closes.Load(); n != 1 {
				t.Errorf("cleanup ran %d times after shutdown, want 1", n)
			}
		})
	}
}

func TestCallCleanupFiresWhenTheClientCancels(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "session", Arguments: map[string]any{"mode": "block"}})
		done <- err
	}()
	<-st.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool after cancel: %v", err)
	}
	if cause := <-st.observed; !errors.Is(cause, context.Canceled) {
		t.Errorf("the tool saw cause %v, want context.Canceled", cause)
	}
	wait, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	rec.waitFor(t, wait, "the close report", func() bool { return len(rec.reports) == 1 })
	if n := st.closes.Load(); n != 1 {
		t.Errorf("cleanup ran %d times, want 1", n)
	}
	if r := rec.allReports()[0]; r.Failed || r.Reason != toolsession.ReasonCallEnd {
		t.Errorf("report %+v", r)
	}
}

func TestRegisteringTwiceInOneCallKeepsOneSession(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	res := call(t, cs, "session", map[string]any{"mode": "twice"})
	if got := text(t, res); got != "reused=true calls=2" {
		t.Errorf("second registration: %q", got)
	}
	if n := st.closes.Load(); n != 1 {
		t.Errorf("cleanup ran %d times, want 1", n)
	}
	if n := len(rec.ofType(tool.TypeSessionReused)); n != 1 {
		t.Errorf("%d session_reused events, want 1", n)
	}
}

func TestSessionsOfDifferentCallsNeverMix(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	s := newServer(t, []tool.Tool{st.tool(), probe()}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	const n = 24
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session"})
			if err != nil || res.IsError {
				t.Errorf("call: %v %+v", err, res)
			}
		})
		wg.Go(func() { decodeSeen(t, call(t, cs, "probe", nil)) })
	}
	wg.Wait()
	if got := st.closes.Load(); got != n {
		t.Errorf("%d cleanups ran for %d calls", got, n)
	}
	hashes := map[string]bool{}
	for _, e := range rec.ofType(tool.TypeSessionStarted) {
		p := e.Payload.(*tool.SessionOpened)
		if hashes[p.KeyHash] || p.Calls != 1 {
			t.Errorf("session %s shared between calls (calls=%d)", p.KeyHash, p.Calls)
		}
		hashes[p.KeyHash] = true
	}
	if len(hashes) != n {
		t.Errorf("%d distinct sessions for %d calls", len(hashes), n)
	}
}

func TestFailingCleanupIsReported(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	boom := errors.New("the sandbox API answered 500")
	st.cleanup = func(context.Context) error { return boom }
	s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	res := call(t, cs, "session", nil)
	if res.IsError || text(t, res) != "done" {
		t.Errorf("a failing cleanup changed the result: %+v", res)
	}
	errs := rec.errors()
	if len(errs) != 1 || !errors.Is(errs[0], boom) {
		t.Fatalf("OnError got %v, want the cleanup's error", errs)
	}
	te := asTeardown(t, errs[0])
	if te.Report.Tool != "session" || te.Report.Reason != toolsession.ReasonCallEnd {
		t.Errorf("teardown error report %+v", te.Report)
	}
	failed := rec.ofType(tool.TypeSessionCloseFailed)
	if len(failed) != 1 {
		t.Fatalf("%d close_failed events, want 1", len(failed))
	}
	if p := failed[0].Payload.(*tool.SessionClosed); p.ErrorClass != "error" || !strings.Contains(p.Error, "500") {
		t.Errorf("close_failed payload %+v", p)
	}
}

func TestBadArgumentsNameTheField(t *testing.T) {
	t.Parallel()
	type in struct {
		Path  string `json:"path"`
		Lines int    `json:"lines,omitempty"`
	}
	var ran atomic.Int32
	read := tool.Func("read", "reads lines", func(_ context.Context, _ *tool.Call, a in) (string, error) {
		ran.Add(1)
		return a.Path, nil
	})
	rec := newRecorder()
	s := newServer(t, []tool.Tool{read}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	for _, tc := range []struct {
		args  any
		field string
	}{
		{map[string]any{}, `field "path": is required`},
		{map[string]any{"path": 7}, `field "path"`},
		{map[string]any{"path": "a", "lines": "ten"}, `field "lines"`},
		{map[string]any{"path": "a", "extra": true}, `field "extra": is not a known argument`},
		{[]int{1}, "must be a JSON object"},
	} {
		res := call(t, cs, "read", tc.args)
		if !res.IsError || !strings.Contains(text(t, res), tc.field) {
			t.Errorf("args %v: %q, want an error naming %s", tc.args, text(t, res), tc.field)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the tool ran %d times on bad arguments", n)
	}
	if res := call(t, cs, "read", map[string]any{"path": "ok"}); res.IsError || text(t, res) != "ok" {
		t.Errorf("good arguments: %+v", res)
	}
	for _, e := range rec.ofType(tool.TypeCallEnd)[:5] {
		if p := e.Payload.(*tool.CallEnd); p.ErrorClass != "invalid_arguments" {
			t.Errorf("tool_end class %q, want invalid_arguments", p.ErrorClass)
		}
	}
}

func TestPanicBecomesAnErrorResult(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	var calls atomic.Int32
	secret := "token=s3cr3t"
	boom := tool.Func("boom", "panics on the first call", func(context.Context, *tool.Call, noArgs) (string, error) {
		if calls.Add(1) == 1 {
			panic(secret)
		}
		return "fine", nil
	})
	s := newServer(t, []tool.Tool{boom}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	res := call(t, cs, "boom", nil)
	if !res.IsError || !strings.Contains(text(t, res), "panicked") {
		t.Fatalf("result %+v, want an error result saying it panicked", res)
	}
	if strings.Contains(text(t, res), secret) {
		t.Error("the panic value reached the client")
	}
	errs := rec.errors()
	var pe *toolsession.PanicError
	if len(errs) != 1 || !errors.As(errs[0], &pe) || pe.Value != secret || len(pe.Stack) == 0 {
		t.Fatalf("OnError got %v, want one *PanicError with the value and stack", errs)
	}
	if n := len(rec.ofType(tool.TypePanic)); n != 1 {
		t.Errorf("%d tool_panic events", n)
	}
	// The session survives.
	if res := call(t, cs, "boom", nil); res.IsError || text(t, res) != "fine" {
		t.Errorf("the call after the panic: %+v", res)
	}
}

func TestLateRegistrationIsClosedAtOnce(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	var closes atomic.Int32
	later := make(chan *tool.Call, 1)
	leaky := tool.Func("leaky", "registers after it returned", func(_ context.Context, c *tool.Call, _ noArgs) (string, error) {
		later <- c
		return "returned", nil
	})
	s := newServer(t, []tool.Tool{leaky}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	call(t, cs, "leaky", nil)
	c := <-later
	out, err := c.OnTeardown(func(context.Context) error { closes.Add(1); return nil }, toolsession.Options{Scope: toolsession.ScopeCall})
	if err != nil || out.KeyHash == "" {
		t.Fatalf("late OnTeardown: %+v %v", out, err)
	}
	if n := closes.Load(); n != 1 {
		t.Fatalf("a registration after the call settled ran %d times, want 1 (at once)", n)
	}
	if s.Tier().Live() != 0 {
		t.Error("the late registration is still held")
	}
}

func TestEventsGoToTheSink(t *testing.T) {
	t.Parallel()
	sink := &memSink{}
	st := newSessionTool()
	s, err := mcpserve.New([]tool.Tool{st.tool()}, mcpserve.Options{Sink: sink, OnError: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, s)
	call(t, cs, "session", nil)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	types := sink.types()
	// As in the agent loop (tool.Invoke for every door): the call's
	// call-scoped session closes before the call's end is told.
	want := []event.Type{tool.TypeCallStart, tool.TypeSessionStarted, tool.TypeSessionClosed, tool.TypeCallEnd}
	if !slices.Equal(types, want) {
		t.Errorf("sink saw %v, want %v", types, want)
	}
	if sink.flushes.Load() != 1 {
		t.Errorf("sink flushed %d times at shutdown, want 1", sink.flushes.Load())
	}
	for _, e := range sink.all() {
		if e.Meta.Time.IsZero() || e.Meta.RunID != "" || e.Meta.SessionID != "" {
			t.Errorf("event %s meta %+v", e.Type, e.Meta)
		}
	}
}

func TestNewRefusesByName(t *testing.T) {
	t.Parallel()
	ok := probe()
	schema := func(s string) tool.Tool { return rawTool{name: "raw", schema: json.RawMessage(s)} }
	for _, tc := range []struct {
		tools []tool.Tool
		want  string
	}{
		{[]tool.Tool{nil}, "tool 0 is nil"},
		{[]tool.Tool{ok, ok}, `two tools are named "probe"`},
		{[]tool.Tool{rawTool{name: "has space"}}, `"has space" holds ' '`},
		{[]tool.Tool{rawTool{name: ""}}, "no name"},
		{[]tool.Tool{rawTool{name: strings.Repeat("x", 129)}}, "MCP allows 128"},
		{[]tool.Tool{tool.WithCheckIn(ok)}, "tool probe asks for a person's approval"},
		{[]tool.Tool{schema(`{"type":"string"}`)}, `tool raw: MCP needs an input schema of "type": "object"`},
		{[]tool.Tool{schema(`[1]`)}, "tool raw: the input schema is not a JSON object"},
		{[]tool.Tool{schema(`{"type":"object","properties":{"a":{"$ref":"#/nowhere"}}}`)}, "tool raw"},
	} {
		_, err := mcpserve.New(tc.tools, mcpserve.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error containing %q", err, tc.want)
		}
	}
	// An empty schema is an object with anything in it.
	s, err := mcpserve.New([]tool.Tool{rawTool{name: "raw"}}, mcpserve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Shutdown(context.Background())
}

// rawTool is a tool with a hand-written spec.
type rawTool struct {
	name   string
	schema json.RawMessage
}

func (r rawTool) Spec() tool.Spec { return tool.Spec{Name: r.name, InputSchema: r.schema} }
func (r rawTool) Call(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) {
	return tool.Result{Content: "raw"}, nil
}

// memSink is an event.Sink that keeps events in memory.
type memSink struct {
	mu      sync.Mutex
	events  []event.Event
	flushes atomic.Int32
}

func (m *memSink) Export(e event.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}
func (m *memSink) Flush(context.Context) error { m.flushes.Add(1); return nil }
func (m *memSink) Close(context.Context) error { return nil }

func (m *memSink) all() []event.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]event.Event(nil), m.events...)
}

func (m *memSink) types() []event.Type {
	var out []event.Type
	for _, e := range m.all() {
		out = append(out, e.Type)
	}
	return out
}

// The door bounds what it holds: past MaxLiveSessions the coldest session
// is closed (reason evicted) and reported, and each is still closed once.
func TestMaxLiveSessionsEvictsTheColdest(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{MaxLiveSessions: 1}))
	cs := connect(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session", Arguments: map[string]any{"mode": "block"}})
	}()
	<-st.started
	if res := call(t, cs, "session", nil); res.IsError {
		t.Fatalf("second call: %s", text(t, res))
	}
	wait, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	rec.waitFor(t, wait, "the eviction and the call-end", func() bool { return len(rec.reports) == 2 })
	reasons := map[toolsession.Reason]int{}
	for _, r := range rec.allReports() {
		reasons[r.Reason]++
	}
	if reasons[toolsession.ReasonEvicted] != 1 || reasons[toolsession.ReasonCallEnd] != 1 {
		t.Errorf("reasons %v, want one evicted and one call-end", reasons)
	}
	cancel()
	<-done
	<-st.observed
	// Shutdown waits for the cancelled call to settle: nothing is left to
	// close, and nothing closes twice.
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := st.closes.Load(); n != 2 {
		t.Errorf("%d closes for two sessions", n)
	}
}
