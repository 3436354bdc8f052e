package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestNewRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New()
	badSchema := &rawTool{spec: tool.Spec{Name: "bad", InputSchema: json.RawMessage(`{"type": 7}`)}}
	tests := []struct {
		name string
		opt  agent.Options
		want string
	}{
		{"no model", agent.Options{}, "Options.Model is nil"},
		{"nil tool", agent.Options{Model: m, Tools: []tool.Tool{nil}}, "nil"},
		{"unnamed tool", agent.Options{Model: m, Tools: []tool.Tool{&rawTool{}}}, "no name"},
		{"duplicate", agent.Options{Model: m, Tools: []tool.Tool{w.tool("n", toolsession.ScopeRun), w.tool("n", toolsession.ScopeCall)}}, `"n" appears twice`},
		{"bad schema", agent.Options{Model: m, Tools: []tool.Tool{badSchema}}, "bad"},
		{"negative iterations", agent.Options{Model: m, MaxIterations: -1}, "MaxIterations"},
		{"negative timeout", agent.Options{Model: m, TeardownTimeout: -1}, "negative"},
	}
	for _, tt := range tests {
		_, err := agent.New(tt.opt)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tt.name, err, tt.want)
		}
	}
	if _, err := agent.New(agent.Options{Model: m, Tools: []tool.Tool{w.tool("n", toolsession.ScopeRun), w.tool("n", toolsession.ScopeCall)}}); !errors.Is(err, agent.ErrToolConflict) {
		t.Errorf("duplicate names: %v, want ErrToolConflict", err)
	}
}

// rawTool implements tool.Tool by hand.
type rawTool struct {
	spec tool.Spec
	fn   func(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error)
}

func (r *rawTool) Spec() tool.Spec { return r.spec }
func (r *rawTool) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	if r.fn == nil {
		return tool.Result{Content: "ok"}, nil
	}
	return r.fn(ctx, c, args)
}

func TestAnAnswerWithoutToolsAndAContinuedConversation(t *testing.T) {
	t.Parallel()
	a, _ := newAgent(t, agent.Options{Model: scripted.New(answer("hello"), answer("again"))})
	res, err := a.Run(bg(), agent.Input{Message: "hi"})
	if err != nil || res.Output != "hello" || res.Paused != nil {
		t.Fatalf("%+v %v", res, err)
	}
	if !strings.HasPrefix(res.RunID, "run-") || len(res.RunID) < 12 {
		t.Fatalf("run id %q", res.RunID)
	}
	c := res.Conversation
	if c == nil || c.Version != agent.ConversationVersion || c.Identity != nil || len(c.Messages) != 2 {
		t.Fatalf("conversation %+v", c)
	}
	// The conversation is plain JSON: any store, any machine.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back agent.Conversation
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	res2, err := a.Run(bg(), agent.Input{Message: "more", Conversation: &back})
	if err != nil || res2.Output != "again" || len(res2.Conversation.Messages) != 4 {
		t.Fatalf("continued: %+v %v", res2, err)
	}
	if res2.RunID == res.RunID {
		t.Fatal("each turn is a new run")
	}
	if len(back.Messages) != 2 {
		t.Fatal("Run changed the caller's conversation")
	}
	if _, err := a.Run(bg(), agent.Input{}); !errors.Is(err, agent.ErrEmptyMessage) {
		t.Fatalf("empty message: %v", err)
	}
	if _, err := a.Run(bg(), agent.Input{Message: "x", Conversation: &agent.Conversation{Version: 9}}); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("unknown conversation version: %v", err)
	}
}

func TestRunIDsAreUnique(t *testing.T) {
	t.Parallel()
	a, _ := newAgent(t, agent.Options{Model: scripted.New(answer("x"))})
	seen := map[string]bool{}
	for range 200 {
		res, err := a.Run(bg(), agent.Input{Message: "x"})
		if err != nil || seen[res.RunID] {
			t.Fatalf("run id %q repeated or %v", res.RunID, err)
		}
		seen[res.RunID] = true
	}
}

func TestToolResultsGoBackToTheModel(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var sawResult string
	m := &probe{Model: scripted.New(calls(call("notes", `{"append":"first"}`)), answer("done")),
		before: func(n int, req llm.Request) {
			if n == 2 {
				last := req.Messages[len(req.Messages)-1]
				sawResult = last.Content
				if last.Role != llm.RoleTool || last.ToolName != "notes" || last.ToolCallID != "call_0_0" {
					t.Errorf("the model did not get the tool result: %+v", last)
				}
			}
			if len(req.Tools) != 1 || req.Tools[0].Name != "notes" || len(req.Tools[0].InputSchema) == 0 {
				t.Errorf("tools offered: %+v", req.Tools)
			}
		}}
	a, _ := newAgent(t, agent.Options{Model: m, System: "be brief", Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	res, err := a.Run(bg(), agent.Input{Message: "note it"})
	if err != nil || res.Output != "done" {
		t.Fatalf("%+v %v", res, err)
	}
	if sawResult != "first" {
		t.Fatalf("tool result %q", sawResult)
	}
	if got := len(res.Conversation.Messages); got != 4 { // user, assistant(calls), tool, assistant
		t.Fatalf("%d messages", got)
	}
}

func TestParallelCallsRunConcurrentlyAndAnswerInOrder(t *testing.T) {
	t.Parallel()
	const n = 4
	var inFlight, maxInFlight atomic.Int32
	started := make(chan struct{})
	var once sync.Once
	var arrived atomic.Int32
	done := make([]chan struct{}, n)
	for i := range done {
		done[i] = make(chan struct{})
	}
	type args struct {
		I int `json:"i"`
	}
	slow := tool.Func("slow", "returns its index", func(ctx context.Context, c *tool.Call, in args) (string, error) {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
				break
			}
		}
		// A barrier: nobody proceeds until all n are in flight at once,
		// which only happens if the calls really run concurrently.
		if arrived.Add(1) == n {
			once.Do(func() { close(started) })
		}
		select {
		case <-started:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		// Finish in reverse order: call i waits for call i+1.
		if in.I+1 < n {
			select {
			case <-done[in.I+1]:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		close(done[in.I])
		return fmt.Sprint("result ", in.I), nil
	})
	var cs []llm.ToolCall
	for i := range n {
		cs = append(cs, call("slow", fmt.Sprintf(`{"i":%d}`, i)))
	}
	a, _ := newAgent(t, agent.Options{Model: scripted.New(calls(cs...), answer("ok")), Tools: []tool.Tool{slow}})
	ctx, cancel := context.WithTimeout(bg(), 30*time.Second) // a failure mode is a deadlock; fail rather than hang
	defer cancel()
	res, err := a.Run(ctx, agent.Input{Message: "go"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := toolMessages(res.Conversation)
	if len(msgs) != n {
		t.Fatalf("%d results", len(msgs))
	}
	for i, m := range msgs {
		if m.Content != fmt.Sprint("result ", i) || m.ToolCallID != fmt.Sprintf("call_0_%d", i) {
			t.Fatalf("result %d is %+v: results must go back in the order the model asked", i, m)
		}
	}
	if maxInFlight.Load() != n {
		t.Fatalf("max in flight %d", maxInFlight.Load())
	}
}

func TestParallelCallsAreBounded(t *testing.T) {
	t.Parallel()
	var inFlight, maxInFlight atomic.Int32
	pair := make(chan struct{}, 2)
	busy := &rawTool{spec: tool.Spec{Name: "busy"}, fn: func(ctx context.Context, _ *tool.Call, _ json.RawMessage) (tool.Result, error) {
		cur := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
				break
			}
		}
		pair <- struct{}{}
		inFlight.Add(-1)
		<-pair
		return tool.Result{Content: "ok"}, nil
	}}
	var cs []llm.ToolCall
	for range 10 {
		cs = append(cs, call("busy", `{}`))
	}
	a, _ := newAgent(t, agent.Options{Model: scripted.New(calls(cs...), answer("ok")), Tools: []tool.Tool{busy}, MaxParallelTools: 2})
	if _, err := a.Run(bg(), agent.Input{Message: "go"}); err != nil {
		t.Fatal(err)
	}
	if got := maxInFlight.Load(); got > 2 {
		t.Fatalf("%d calls ran at once with MaxParallelTools 2", got)
	}
}

func TestInvalidArgumentsGoBackAsAnErrorThatNamesTheField(t *testing.T) {
	t.Parallel()
	type addArgs struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	var ran atomic.Int32
	add := tool.Func("add", "adds", func(_ context.Context, _ *tool.Call, in addArgs) (int, error) {
		ran.Add(1)
		return in.A + in.B, nil
	})
	m := scripted.New(
		calls(call("add", `{"a":1}`)),
		calls(call("add", `{"a":"one","b":2}`)),
		calls(call("add", `not json`)),
		calls(call("add", `{"a":1,"b":2}`)),
		answer("3"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{add}})
	res, err := a.Run(bg(), agent.Input{Message: "1+2"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := toolMessages(res.Conversation)
	if !msgs[0].IsError || !strings.Contains(msgs[0].Content, `"b"`) || !strings.Contains(msgs[0].Content, "required") {
		t.Fatalf("missing field: %+v", msgs[0])
	}
	if !msgs[1].IsError || !strings.Contains(msgs[1].Content, `"a"`) {
		t.Fatalf("wrong type: %+v", msgs[1])
	}
	if !msgs[2].IsError || !strings.Contains(msgs[2].Content, "JSON object") {
		t.Fatalf("not JSON: %+v", msgs[2])
	}
	if msgs[3].IsError || msgs[3].Content != "3" || ran.Load() != 1 {
		t.Fatalf("the retry: %+v, ran %d", msgs[3], ran.Load())
	}
	// The conversation stays valid JSON even though the model sent
	// arguments that were not.
	if _, err := json.Marshal(res.Conversation); err != nil {
		t.Fatal(err)
	}
	ends := rec.of(tool.TypeCallEnd)
	if ends[0].Payload.(*tool.CallEnd).ErrorClass != "invalid_arguments" || ends[3].Payload.(*tool.CallEnd).IsError {
		t.Fatalf("tool end events: %+v %+v", ends[0].Payload, ends[3].Payload)
	}
}

func TestToolErrorsAndPanicsBecomeResults(t *testing.T) {
	t.Parallel()
	failing := tool.Func("failing", "fails", func(context.Context, *tool.Call, struct{}) (string, error) {
		return "", errors.New("the disk is full")
	})
	soft := &rawTool{spec: tool.Spec{Name: "soft"}, fn: func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) {
		return tool.Result{Content: "no such file", IsError: true}, nil
	}}
	panicky := &rawTool{spec: tool.Spec{Name: "panicky"}, fn: func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) {
		panic("index out of range")
	}}
	m := scripted.New(calls(call("failing", `{}`), call("panicky", `{}`), call("soft", `{}`), call("nope", `{}`)), answer("recovered"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{failing, panicky, soft}})
	res, err := a.Run(bg(), agent.Input{Message: "go"})
	if err != nil || res.Output != "recovered" {
		t.Fatalf("a tool failure must not fail the run: %+v %v", res, err)
	}
	msgs := toolMessages(res.Conversation)
	if !msgs[0].IsError || !strings.Contains(msgs[0].Content, "the disk is full") {
		t.Fatalf("tool error: %+v", msgs[0])
	}
	if !msgs[1].IsError || !strings.Contains(msgs[1].Content, "panicked") {
		t.Fatalf("panic: %+v", msgs[1])
	}
	if !msgs[2].IsError || msgs[2].Content != "no such file" {
		t.Fatalf("error result: %+v", msgs[2])
	}
	if !msgs[3].IsError || !strings.Contains(msgs[3].Content, `no tool named "nope"`) || !strings.Contains(msgs[3].Content, "failing, panicky, soft") {
		t.Fatalf("unknown tool: %+v", msgs[3])
	}
	panics := rec.of(tool.TypePanic)
	if len(panics) != 1 {
		t.Fatalf("%d panic events", len(panics))
	}
	p := panics[0].Payload.(*tool.Panicked)
	if p.Tool != "panicky" || !strings.Contains(p.Panic, "index out of range") || panics[0].Meta.RunID != res.RunID {
		t.Fatalf("panic event %+v %+v", p, panics[0].Meta)
	}
	classes := map[string]string{}
	for _, e := range rec.of(tool.TypeCallEnd) {
		p := e.Payload.(*tool.CallEnd)
		classes[p.Tool] = p.ErrorClass
	}
	want := map[string]string{"failing": "tool_error", "panicky": "panic", "soft": "tool_error", "nope": "unknown_tool"}
	for k, v := range want {
		if classes[k] != v {
			t.Errorf("tool %s: class %q, want %q", k, classes[k], v)
		}
	}
}

func TestMaxIterationsEndsTheRunAndNamesTheLimit(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var steps []scripted.Step
	for range 40 {
		steps = append(steps, calls(call("notes", `{"append":"again"}`)))
	}
	for _, limit := range []int{0, 3} {
		a, rec := newAgent(t, agent.Options{Model: scripted.New(steps...), MaxIterations: limit, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
		res, err := a.Run(bg(), agent.Input{Message: "loop"})
		want := limit
		if want == 0 {
			want = agent.DefaultMaxIterations
		}
		if !errors.Is(err, agent.ErrMaxIterations) || !strings.Contains(err.Error(), fmt.Sprint(want)) || !strings.Contains(err.Error(), "MaxIterations") {
			t.Fatalf("limit %d: err = %v", limit, err)
		}
		if res.RunID == "" || res.Conversation != nil {
			t.Fatalf("an error result carries the run id only: %+v", res)
		}
		if ends := rec.turnEnds(); len(ends) != 1 || ends[0].Outcome != event.OutcomeError || ends[0].Iterations != want {
			t.Fatalf("turn end %+v", ends[0])
		}
		// An error is a terminal: the run's session closed, once.
		if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != string(toolsession.ReasonRunEnd) {
			t.Fatalf("closes %+v", cl)
		}
	}
	if open, opened, closed := w.stats(); open != 0 || opened != 2 || closed != 2 {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
}

func TestSameSessionConcurrentlyIsRefused(t *testing.T) {
	t.Parallel()
	g := newGate()
	m := scripted.New(calls(call("gate", `{}`)), answer("done"))
	a, _ := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{g.tool(nil)}})
	errc := make(chan error, 1)
	go func() {
		_, err := a.Run(bg(), agent.Input{Message: "hold", SessionID: "s1"})
		errc <- err
	}()
	<-g.entered
	if _, err := a.Run(bg(), agent.Input{Message: "too", SessionID: "s1"}); !errors.Is(err, agent.ErrSessionBusy) {
		t.Fatalf("same session: %v", err)
	}
	// Another session, and a run bound to none, are not held up.
	other := make(chan error, 1)
	go func() {
		_, err := a.Run(bg(), agent.Input{Message: "other", SessionID: "s2"})
		other <- err
	}()
	<-g.entered
	close(g.release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(bg(), agent.Input{Message: "now", SessionID: "s1"}); err != nil {
		t.Fatalf("the session is free again after its run: %v", err)
	}
}

func TestConcurrentRunsNeverShareASession(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	// Every run gets the same tool call ids from the script: call scope and
	// run scope must still keep them apart.
	m := scripted.New(
		calls(call("scratch", `{"append":"x"}`), call("notes", `{"append":"mine"}`)),
		calls(call("notes", `{}`)),
		answer("done"))
	a, _ := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), w.tool("scratch", toolsession.ScopeCall)}})
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := &tool.Identity{Tenant: "acme", Principal: fmt.Sprint("user", i)}
			res, err := a.Run(bg(), agent.Input{Message: "go", Identity: id, SessionID: fmt.Sprint("s", i)})
			if err != nil {
				errs <- err
				return
			}
			msgs := toolMessages(res.Conversation)
			// Each run sees exactly its own note: one "mine" from the
			// first call and the same note read back, never another's.
			if msgs[0].Content != "x" || msgs[1].Content != "mine" || msgs[2].Content != "mine" {
				errs <- fmt.Errorf("run %d saw %q / %q / %q", i, msgs[0].Content, msgs[1].Content, msgs[2].Content)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if open, opened, closed := w.stats(); open != 0 || opened != 2*n || closed != 2*n {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
	if a.LiveToolSessions() != 0 {
		t.Fatalf("%d live", a.LiveToolSessions())
	}
	ids := map[string]bool{}
	for _, c := range w.seen() {
		if c.Tool == "scratch" {
			if ids[c.ToolCallID] {
				t.Fatalf("two calls got tool call id %q", c.ToolCallID)
			}
			ids[c.ToolCallID] = true
			if !strings.HasPrefix(c.ToolCallID, c.RunID+":") {
				t.Fatalf("tool call id %q does not carry its run %q", c.ToolCallID, c.RunID)
			}
		}
	}
}

func TestIdentityIsNeverSynthesised(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New(calls(call("notes", `{}`)), answer("ok"))
	a, rec := newAgent(t, agent.Options{ID: "agent-1", Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	res, err := a.Run(bg(), agent.Input{Message: "anon", SessionID: "conv-7"})
	if err != nil {
		t.Fatal(err)
	}
	seen := w.seen()
	if seen[0].Identity != nil {
		t.Fatalf("a run without identity handed the tool %+v", seen[0].Identity)
	}
	if res.Conversation.Identity != nil {
		t.Fatalf("conversation identity %+v", res.Conversation.Identity)
	}
	for _, e := range rec.all() {
		if e.Meta.Tenant != "" || e.Meta.Principal != "" {
			t.Fatalf("event %s has meta %+v", e.Type, e.Meta)
		}
		if e.Meta.AgentID != "agent-1" {
			t.Fatalf("event %s lacks the agent id: %+v", e.Type, e.Meta)
		}
	}
	// The key spells absence; it does not borrow the session id.
	wantKey := toolsession.HashKey("t=_/p=_/r=" + res.RunID)
	if st := rec.of(tool.TypeSessionStarted); st[0].Payload.(*tool.SessionOpened).KeyHash != wantKey {
		t.Fatalf("key hash %+v, want the key of an absent identity", st[0].Payload)
	}

	// Given, it arrives unchanged — as a copy the tool cannot change for
	// anyone else.
	id := &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "c-1"}
	mut := tool.Func("mutate", "tries to change who it acts for", func(_ context.Context, c *tool.Call, _ struct{}) (string, error) {
		got := *c.Identity
		c.Identity.Principal = "mallory"
		return got.Tenant + "/" + got.Principal + "/" + got.ConversationID, nil
	})
	m2 := scripted.New(calls(call("mutate", `{}`)), calls(call("mutate", `{}`)), answer("ok"))
	a2, rec2 := newAgent(t, agent.Options{Model: m2, Tools: []tool.Tool{mut}})
	res2, err := a2.Run(bg(), agent.Input{Message: "hi", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range toolMessages(res2.Conversation) {
		if msg.Content != "acme/alice/c-1" {
			t.Fatalf("the tool saw %q", msg.Content)
		}
	}
	if id.Principal != "alice" || res2.Conversation.Identity.Principal != "alice" {
		t.Fatal("a tool changed the caller's identity")
	}
	for _, e := range rec2.all() {
		if e.Meta.Tenant != "acme" || e.Meta.Principal != "alice" {
			t.Fatalf("event %s meta %+v", e.Type, e.Meta)
		}
	}
}

func TestAConversationContinuesOnlyUnderItsIdentity(t *testing.T) {
	t.Parallel()
	a, _ := newAgent(t, agent.Options{Model: scripted.New(answer("a"), answer("b"))})
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	res, err := a.Run(bg(), agent.Input{Message: "hi", Identity: alice})
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []*tool.Identity{nil, {Tenant: "acme", Principal: "bob"}, {Tenant: "evil", Principal: "alice"}} {
		if _, err := a.Run(bg(), agent.Input{Message: "mine now", Identity: other, Conversation: res.Conversation}); !errors.Is(err, agent.ErrIdentityMismatch) {
			t.Fatalf("identity %+v: %v", other, err)
		}
	}
	if _, err := a.Run(bg(), agent.Input{Message: "again", Identity: &tool.Identity{Tenant: "acme", Principal: "alice"}, Conversation: res.Conversation}); err != nil {
		t.Fatalf("same identity: %v", err)
	}
}

func TestExtraToolsJoinOneRunOnly(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	bound := w.tool("bound", toolsession.ScopeRun)
	var offered [][]string
	var mu sync.Mutex
	m := &probe{Model: scripted.New(calls(call("bound", `{"append":"b"}`)), answer("ok")), before: func(_ int, req llm.Request) {
		var names []string
		for _, d := range req.Tools {
			names = append(names, d.Name)
		}
		mu.Lock()
		offered = append(offered, names)
		mu.Unlock()
	}}
	a, _ := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	res, err := a.Run(bg(), agent.Input{Message: "x", Tools: []tool.Tool{bound}})
	if err != nil || toolMessages(res.Conversation)[0].Content != "b" {
		t.Fatalf("%+v %v", res, err)
	}
	if fmt.Sprint(offered[0]) != "[notes bound]" {
		t.Fatalf("offered %v", offered)
	}
	res, err = a.Run(bg(), agent.Input{Message: "x"})
	if err != nil || !strings.Contains(toolMessages(res.Conversation)[0].Content, `no tool named "bound"`) {
		t.Fatalf("a per-run tool leaked into the next run: %+v %v", res, err)
	}
	if _, err := a.Run(bg(), agent.Input{Message: "x", Tools: []tool.Tool{w.tool("notes", toolsession.ScopeCall)}}); !errors.Is(err, agent.ErrToolConflict) {
		t.Fatalf("clash with an agent tool: %v", err)
	}
	if _, err := a.Run(bg(), agent.Input{Message: "x", Tools: []tool.Tool{bound, bound}}); !errors.Is(err, agent.ErrToolConflict) {
		t.Fatalf("duplicate extra tools: %v", err)
	}
}

// A sink attached through Bus after New, on an agent built with none, sees
// every event from then on.
func TestSinkAddedLaterSeesEverything(t *testing.T) {
	t.Parallel()
	a, err := agent.New(agent.Options{Model: scripted.New(answer("hi"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	rec := &recorder{}
	if err := a.Bus().Add(rec, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), agent.Input{Message: "hello"}); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []event.Type{event.TypeTurnStart, event.TypeLLMStart, event.TypeLLMEnd, event.TypeTurnEnd} {
		if len(rec.of(typ)) != 1 {
			t.Errorf("%s: got %d events, want 1", typ, len(rec.of(typ)))
		}
	}
}

// An event a tool sends through tool.Call.Emit reaches the agent's sinks
// stamped with the run's meta.
func TestToolEventsReachTheBusWithRunMeta(t *testing.T) {
	t.Parallel()
	type none struct{}
	emitter := tool.Func("emitter", "emits", func(_ context.Context, c *tool.Call, _ none) (string, error) {
		c.Emit(event.Event{Type: code.TypeRun, Payload: &code.RunReport{Tool: "emitter", Language: "python", OK: true}})
		return "done", nil
	})
	model := scripted.New(scripted.Step{ToolCalls: []llm.ToolCall{{ID: "e1", Name: "emitter", Args: json.RawMessage(`{}`)}}}, answer("ok"))
	a, rec := newAgent(t, agent.Options{ID: "agent-7", Model: model, Tools: []tool.Tool{emitter}})
	res, err := a.Run(context.Background(), agent.Input{Message: "go", SessionID: "s-9", Identity: &tool.Identity{Tenant: "acme", Principal: "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	runs := rec.of(code.TypeRun)
	if len(runs) != 1 {
		t.Fatalf("%d code_run events, want 1", len(runs))
	}
	m := runs[0].Meta
	if m.RunID != res.RunID || m.SessionID != "s-9" || m.Tenant != "acme" || m.Principal != "bob" || m.AgentID != "agent-7" || m.Seq == 0 {
		t.Fatalf("meta = %+v, want the run's", m)
	}
}

// Every tool-session event carries the caller's tenant and principal in
// its meta, the closes included (they fire after the run, from the
// registration's origin) — and none when no identity was given.
func TestSessionEventsCarryTheOriginsIdentity(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	notes := w.tool("notes", toolsession.ScopeRun)
	model := scripted.New(calls(call("notes", `{"append":"x"}`)), answer("done"))
	a, rec := newAgent(t, agent.Options{Model: model, Tools: []tool.Tool{notes}})
	if _, err := a.Run(context.Background(), agent.Input{Message: "go", Identity: &tool.Identity{Tenant: "acme", Principal: "bob"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), agent.Input{Message: "go"}); err != nil {
		t.Fatal(err)
	}
	evs := rec.of(tool.TypeSessionStarted, tool.TypeSessionClosed)
	if len(evs) != 4 {
		t.Fatalf("%d session events, want 4", len(evs))
	}
	for i, e := range evs {
		wantTenant, wantPrincipal := "acme", "bob"
		if i >= 2 {
			wantTenant, wantPrincipal = "", ""
		}
		if e.Meta.Tenant != wantTenant || e.Meta.Principal != wantPrincipal {
			t.Errorf("%s #%d meta = %+v, want tenant %q principal %q", e.Type, i, e.Meta, wantTenant, wantPrincipal)
		}
	}
}
