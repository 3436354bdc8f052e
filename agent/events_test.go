package agent_test

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestTheEventsOfARun(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	a, rec := newAgent(t, agent.Options{ID: "a1", Model: scripted.New(calls(call("scratch", `{}`)), answer("ok")), Tools: []tool.Tool{w.tool("scratch", toolsession.ScopeCall)}})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	res, err := a.Run(bg(), agent.Input{Message: "hello", SessionID: "s1", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	want := []event.Type{
		event.TypeTurnStart,
		event.TypeLLMStart, event.TypeLLMEnd,
		tool.TypeCallStart, tool.TypeSessionStarted, tool.TypeSessionClosed, tool.TypeCallEnd,
		event.TypeLLMStart, event.TypeLLMEnd,
		event.TypeTurnEnd,
	}
	evs := rec.all()
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %v", len(evs), len(want), evs)
	}
	var seq uint64
	for i, e := range evs {
		if e.Type != want[i] {
			t.Fatalf("event %d is %s, want %s", i, e.Type, want[i])
		}
		if e.Meta.Seq <= seq || e.Meta.Time.IsZero() {
			t.Fatalf("event %d meta %+v", i, e.Meta)
		}
		seq = e.Meta.Seq
		if e.Meta.RunID != res.RunID || e.Meta.SessionID != "s1" || e.Meta.AgentID != "a1" {
			t.Fatalf("event %s meta %+v", e.Type, e.Meta)
		}
	}
	ts := evs[0].Payload.(*event.TurnStart)
	if ts.MessageChars != 5 || ts.Tools != 1 || ts.Resumed {
		t.Fatalf("turn start %+v", ts)
	}
	ls := evs[1].Payload.(*event.LLMStart)
	le := evs[2].Payload.(*event.LLMEnd)
	if ls.Model != "scripted" || ls.Iteration != 1 || ls.Messages != 1 || le.ToolCalls != 1 || le.StopReason != "tool_use" || le.Model != "scripted" {
		t.Fatalf("llm %+v %+v", ls, le)
	}
	tst, te := evs[3].Payload.(*tool.CallStart), evs[6].Payload.(*tool.CallEnd)
	if tst.Tool != "scratch" || tst.ToolCallID != res.RunID+":call_0_0" || te.ToolCallID != tst.ToolCallID || te.IsError {
		t.Fatalf("tool %+v %+v", tst, te)
	}
	ss := evs[4].Payload.(*tool.SessionOpened)
	if ss.Scope != "call" || ss.KeyHash != toolsession.HashKey("c="+tst.ToolCallID) || ss.RunnerID != "tempdir" || ss.Calls != 1 {
		t.Fatalf("session %+v", ss)
	}
	if evs[4].Meta.Tenant != "acme" || evs[4].Meta.Principal != "alice" {
		t.Fatalf("session_started carries the run's identity: %+v", evs[4].Meta)
	}
	end := evs[9].Payload.(*event.TurnEnd)
	if end.Outcome != event.OutcomeAnswer || end.Iterations != 2 || end.DurationMs < 0 {
		t.Fatalf("turn end %+v", end)
	}
	// The raw key never leaves: no event names the tool call's key.
	for _, e := range evs {
		if p, ok := e.Payload.(*tool.SessionOpened); ok && strings.Contains(p.KeyHash, "c=") {
			t.Fatal("a raw key in an event")
		}
	}
}

func TestStreamedTextReachesOnlyTheSinksThatAskForIt(t *testing.T) {
	t.Parallel()
	full := &recorder{}
	m := scripted.New(answer("the quick brown fox")).Streaming()
	a, standard := newAgent(t, agent.Options{Model: m, Routes: []agent.Route{{Sink: full, Filter: event.Filter{Tier: event.TierFull}}}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err != nil || res.Output != "the quick brown fox" {
		t.Fatal(res, err)
	}
	var text strings.Builder
	for _, e := range full.of(event.TypeLLMDelta) {
		text.WriteString(e.Payload.(*event.LLMDelta).Text)
	}
	if text.String() != "the quick brown fox" {
		t.Fatalf("deltas %q", text.String())
	}
	if msgs := full.of(event.TypeLLMMessage); len(msgs) != 1 || msgs[0].Payload.(*event.LLMMessage).Content != "the quick brown fox" {
		t.Fatalf("messages %+v", msgs)
	}
	if len(standard.of(event.TypeLLMDelta, event.TypeLLMMessage)) != 0 {
		t.Fatal("content reached a standard-tier sink")
	}
}

// brokenStream streams an error midway.
type brokenStream struct{ *scripted.Streaming }

var _ llm.Streamer = brokenStream{}

func (b brokenStream) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		if !yield(llm.Chunk{Text: "partial "}, nil) {
			return
		}
		yield(llm.Chunk{}, errors.New("connection reset"))
	}
}

func TestAFailingModelIsAFatalEvent(t *testing.T) {
	t.Parallel()
	a, rec := newAgent(t, agent.Options{Model: brokenStream{scripted.New(answer("x")).Streaming()}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err == nil || !strings.Contains(err.Error(), "connection reset") || res.RunID == "" {
		t.Fatalf("%+v %v", res, err)
	}
	f := rec.of(event.TypeFatal)
	if len(f) != 1 || !strings.Contains(f[0].Payload.(*event.Fatal).Error, "connection reset") || f[0].Meta.RunID != res.RunID {
		t.Fatalf("%+v", f)
	}
	le := rec.of(event.TypeLLMEnd)
	if len(le) != 1 || !strings.Contains(le[0].Payload.(*event.LLMEnd).Error, "connection reset") {
		t.Fatalf("%+v", le)
	}
	if ends := rec.turnEnds(); ends[0].Outcome != event.OutcomeError || ends[0].Error == "" {
		t.Fatalf("%+v", ends)
	}
}

// Progress hears a run's progress events, with no sink at all, in order,
// and only that run's.
func TestProgressHearsTheRun(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	a, err := agent.New(agent.Options{Model: scripted.New(calls(call("notes", `{}`)), answer("done")),
		Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(bg())
	var mu sync.Mutex
	var got []event.Type
	res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s1", Progress: func(e event.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Meta.SessionID != "s1" || e.Meta.RunID == "" {
			t.Errorf("%s meta %+v", e.Type, e.Meta)
		}
		got = append(got, e.Type)
	}})
	if err != nil || res.Output != "done" {
		t.Fatal(res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []event.Type{event.TypeTurnStart, tool.TypeCallStart, tool.TypeCallEnd, event.TypeLLMMessage}
	if !slices.Equal(got, want) {
		t.Fatalf("progress %v; want %v", got, want)
	}
	for _, typ := range got {
		if !slices.Contains(agent.ProgressTypes, typ) {
			t.Fatalf("%s is not a progress type", typ)
		}
	}
}
