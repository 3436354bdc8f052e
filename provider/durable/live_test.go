package durable_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// A durable turn's outputs reach its caller while the workflow runs: the
// model's text and the tool call's start arrive while the tool is still
// blocked (on a channel only the test opens), and nothing is given twice
// when the turn ends.
func TestOutputsStreamWhileTheTurnRuns(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	g := newGate()
	r := openReplica(t, c, durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: &caller{},
		Tools: []tool.Tool{g.tool()}, Store: native.NewMemoryStore(0)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := r.inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "s1", WorkingDirectory: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx, provider.CloseRequested)

	var got []string
	opened := false
	for o, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "call gate"}) {
		if err != nil {
			t.Fatalf("turn: %v (after %q)", err, got)
		}
		got = append(got, string(o.Kind)+":"+o.Text)
		if o.Kind == provider.OutputActivity && o.Text == "calling gate" {
			// The tool has been entered and waits: the turn is mid-way.
			<-g.entered
			if !slices.Contains(got, "text:calling gate") {
				t.Fatalf("the model's text did not come before the tool call: %q", got)
			}
			close(g.open)
			opened = true
		}
	}
	if !opened {
		t.Fatalf("no output arrived while the tool was in flight: %q", got)
	}
	want := []string{"turn.started:", "text:calling gate", "activity:calling gate", "activity:gate returned",
		"text:the tool said: opened", "usage:", "turn.completed:"} // usage just before the end
	if !slices.Equal(got, want) {
		t.Fatalf("outputs %q\nwant    %q", got, want)
	}
}

// A host tool lent to a durable session is offered to the model, called
// by it (as a tool activity on the session's replica), and its result
// reaches the model; the binding's instructions come first in every model
// call and are not stored; Close releases the binding, once.
func TestHostToolLentToADurableSession(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	model := &caller{}
	store := native.NewMemoryStore(0)
	r := openReplica(t, c, durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: model, Store: store})
	ctx := context.Background()
	h := &conformance.Echo{}
	s, err := r.inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "s1", WorkingDirectory: t.TempDir(),
		HostBinding: h.Binding(&provider.Instructions{Placement: provider.PlacementContext, Text: "Use conformance_echo when asked."})})
	if err != nil {
		t.Fatal(err)
	}
	outs := collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: `call conformance_echo {"text":"hi"}`}))
	if got := textOf(outs); !strings.HasSuffix(got, `the tool said: {"echo":"hi"}`) {
		t.Fatalf("the model was told %q", got)
	}
	calls := h.Invocations()
	if len(calls) != 1 || calls[0].Tool != "conformance_echo" || string(calls[0].Arguments) != `{"text":"hi"}` {
		t.Fatalf("the host tool was invoked %+v", calls)
	}
	reqs := model.requests()
	for _, req := range reqs {
		if !slices.ContainsFunc(req.Tools, func(d llm.ToolDef) bool { return d.Name == "conformance_echo" }) {
			t.Fatalf("a model call was not offered conformance_echo: %+v", req.Tools)
		}
		if req.Messages[0].Content != "Use conformance_echo when asked." {
			t.Fatalf("a model call did not open with the binding's instructions: %+v", req.Messages[0])
		}
	}
	rec, err := store.Load(ctx, s.Binding())
	if err != nil {
		t.Fatal(err)
	}
	if m := rec.Conversation.Messages; len(m) != 4 || m[0].Content != `call conformance_echo {"text":"hi"}` {
		t.Fatalf("stored %+v; want the turn's 4 messages and no instructions", m)
	}
	for range 2 {
		if err := s.Close(ctx, provider.CloseRequested); err != nil {
			t.Fatal(err)
		}
	}
	if released := h.Releases(); released != 1 {
		t.Fatalf("the binding was released %d times, want once", released)
	}
}

// A durable turn emits the agent's events from the replica that ran each
// activity — turn, model calls, tool calls, the tool session it opened
// and its close at the turn's end — and the events file passes the audit
// and holds no isolation key.
func TestTurnEventsPassTheAudit(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	path := filepath.Join(t.TempDir(), "events.ndjson")
	sink, err := ndjson.Open(path, ndjson.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(sink, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var mu sync.Mutex
	workspace := tool.Func("workspace", "holds a workspace for the turn", func(_ context.Context, c *tool.Call, _ struct{}) (string, error) {
		key, err := c.Key(toolsession.ScopeRun)
		if err != nil {
			return "", err
		}
		mu.Lock()
		keys = append(keys, key)
		mu.Unlock()
		if _, err := c.OnTeardown(func(context.Context) error { return nil }, toolsession.Options{Scope: toolsession.ScopeRun, Key: key}); err != nil {
			return "", err
		}
		return "ready", nil
	})
	r := openReplica(t, c, durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: &caller{},
		Tools: []tool.Tool{workspace}, Store: native.NewMemoryStore(0), Events: bus.Export})
	ctx := context.Background()
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	s, err := r.inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "s1", WorkingDirectory: t.TempDir(),
		Configuration: native.SessionConfig{Identity: id}.JSON()})
	if err != nil {
		t.Fatal(err)
	}
	outs := collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "call workspace"}))
	if got := last(outs); got.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the turn ended %+v", got)
	}
	if err := s.Close(ctx, provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if err := bus.Close(ctx); err != nil {
		t.Fatal(err)
	}

	var types []event.Type
	audit.Read([]string{path}, func(e event.Event) {
		types = append(types, e.Type)
		if e.Meta.RunID != "t1" || e.Meta.SessionID != "s1" || e.Meta.Tenant != "acme" || e.Meta.Principal != "alice" {
			t.Errorf("%s has meta %+v", e.Type, e.Meta)
		}
	})
	want := []event.Type{event.TypeTurnStart, event.TypeLLMStart, event.TypeLLMEnd, tool.TypeCallStart, tool.TypeSessionStarted,
		tool.TypeCallEnd, event.TypeLLMStart, event.TypeLLMEnd, tool.TypeSessionClosed, event.TypeTurnEnd}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v\nwant   %v", types, want)
	}
	rep := audit.Audit([]string{path})
	if rep.Problems() || rep.BadLines != 0 || len(rep.Tools) != 1 || rep.Tools[0].Closed["run-end"] != 1 {
		b, _ := json.MarshalIndent(rep, "", "  ")
		t.Fatalf("the audit: %s", b)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 || strings.Contains(string(raw), keys[0]) {
		t.Fatalf("the events file holds the isolation key (or no key was made: %d)", len(keys))
	}
}
