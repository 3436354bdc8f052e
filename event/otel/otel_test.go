package otel_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/otel"
	"github.com/agentry-dev/agentry/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	t      *testing.T
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	sink   *otel.Sink
	at     time.Time
	seq    uint64
}

func newHarness(t *testing.T, opt otel.Options) *harness {
	t.Helper()
	h := &harness{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(),
		at: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	opt.TracerProvider, opt.MeterProvider = tp, mp
	s, err := otel.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	h.sink = s
	t.Cleanup(func() {
		_ = s.Close(context.Background())
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return h
}

// emit exports an event one second after the previous one.
func (h *harness) emit(run string, typ event.Type, p any) time.Time {
	h.seq++
	h.at = h.at.Add(time.Second)
	h.sink.Export(event.Event{Type: typ, Payload: p, Meta: event.Meta{RunID: run, SessionID: "conv-1", AgentID: "analyst", Seq: h.seq, Time: h.at}})
	return h.at
}

func (h *harness) ended() map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range h.spans.Ended() {
		out[s.Name()] = s
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("%q is not a child of %q", child.Name(), parent.Name())
	}
}

func TestSpansForARun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, otel.Options{})
	start := h.emit("r1", event.TypeTurnStart, &event.TurnStart{MessageChars: 10, Tools: 1})
	llm1 := h.emit("r1", event.TypeLLMStart, &event.LLMStart{Model: "claude-x", Iteration: 1})
	h.emit("r1", event.TypeLLMEnd, &event.LLMEnd{Model: "claude-x", Iteration: 1, DurationMs: 1000, InputTokens: 120, OutputTokens: 30, StopReason: "tool_use", ToolCalls: 1})
	toolAt := h.emit("r1", tool.TypeCallStart, &tool.CallStart{Tool: "run_code", ToolCallID: "call-1", Iteration: 1})
	h.emit("r1", tool.TypeSessionStarted, &tool.SessionOpened{Tool: "run_code", Scope: "run", KeyHash: "3fa94c0d2b1e"})
	toolEnd := h.emit("r1", tool.TypeCallEnd, &tool.CallEnd{Tool: "run_code", ToolCallID: "call-1", DurationMs: 1000})
	it2 := h.emit("r1", event.TypeLLMStart, &event.LLMStart{Model: "claude-x", Iteration: 2})
	h.emit("r1", event.TypeLLMEnd, &event.LLMEnd{Model: "claude-x", Iteration: 2, DurationMs: 1000, StopReason: "end_turn"})
	end := h.emit("r1", event.TypeTurnEnd, &event.TurnEnd{Outcome: event.OutcomeAnswer, Iterations: 2})

	spans := h.spans.Ended()
	if len(spans) != 6 || len(h.spans.Started()) != 6 {
		t.Fatalf("%d spans ended of %d started, want 6", len(spans), len(h.spans.Started()))
	}
	byName := h.ended()
	turn, i1, i2, toolSpan := byName["invoke_agent analyst"], byName["agentry.iteration 1"], byName["agentry.iteration 2"], byName["execute_tool run_code"]
	if turn == nil || i1 == nil || i2 == nil || toolSpan == nil {
		t.Fatalf("span names: %v", names(spans))
	}
	var chats []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "chat claude-x" {
			chats = append(chats, s)
		}
	}
	if len(chats) != 2 {
		t.Fatalf("span names: %v", names(spans))
	}
	childOf(t, i1, turn)
	childOf(t, i2, turn)
	childOf(t, chats[0], i1)
	childOf(t, toolSpan, i1)
	childOf(t, chats[1], i2)
	if turn.Parent().IsValid() {
		t.Fatal("the turn of a fresh run has a parent")
	}

	// Times are the events' times.
	for _, c := range []struct {
		s          sdktrace.ReadOnlySpan
		start, end time.Time
	}{{turn, start, end}, {i1, llm1, it2}, {i2, it2, end}, {toolSpan, toolAt, toolEnd}} {
		if !c.s.StartTime().Equal(c.start) || !c.s.EndTime().Equal(c.end) {
			t.Errorf("%s: %v → %v, want %v → %v", c.s.Name(), c.s.StartTime(), c.s.EndTime(), c.start, c.end)
		}
	}

	a := attrs(turn)
	if a["gen_ai.operation.name"].AsString() != "invoke_agent" || a["gen_ai.agent.id"].AsString() != "analyst" ||
		a["gen_ai.conversation.id"].AsString() != "conv-1" || a["agentry.run.id"].AsString() != "r1" ||
		a["agentry.turn.outcome"].AsString() != "answer" || a["agentry.turn.iterations"].AsInt64() != 2 {
		t.Fatalf("turn attributes %v", a)
	}
	a = attrs(chats[0])
	if a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.request.model"].AsString() != "claude-x" ||
		a["gen_ai.usage.input_tokens"].AsInt64() != 120 || a["gen_ai.usage.output_tokens"].AsInt64() != 30 ||
		!slices.Equal(a["gen_ai.response.finish_reasons"].AsStringSlice(), []string{"tool_use"}) {
		t.Fatalf("chat attributes %v", a)
	}
	a = attrs(toolSpan)
	if a["gen_ai.operation.name"].AsString() != "execute_tool" || a["gen_ai.tool.name"].AsString() != "run_code" || a["gen_ai.tool.call.id"].AsString() != "call-1" {
		t.Fatalf("tool attributes %v", a)
	}
	if evs := turn.Events(); len(evs) != 1 || evs[0].Name != string(tool.TypeSessionStarted) {
		t.Fatalf("turn events %v", evs)
	}
	for _, s := range spans {
		if s.Status().Code == codes.Error {
			t.Fatalf("%s has an error status: %v", s.Name(), s.Status())
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func TestAResumedTurnContinuesTheRunsTrace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, otel.Options{})
	h.emit("r1", event.TypeTurnStart, &event.TurnStart{})
	h.emit("r1", tool.TypeCallStart, &tool.CallStart{Tool: "run_code", ToolCallID: "c1", Iteration: 1})
	h.emit("r1", event.TypeTurnEnd, &event.TurnEnd{Outcome: event.OutcomePaused})
	h.emit("r1", event.TypeTurnStart, &event.TurnStart{Resumed: true})
	h.emit("r1", event.TypeTurnEnd, &event.TurnEnd{Outcome: event.OutcomeAnswer})

	var turns []sdktrace.ReadOnlySpan
	var toolSpan sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		switch {
		case strings.HasPrefix(s.Name(), "invoke_agent"):
			turns = append(turns, s)
		case strings.HasPrefix(s.Name(), "execute_tool"):
			toolSpan = s
		}
	}
	if len(turns) != 2 {
		t.Fatalf("%d turns", len(turns))
	}
	paused, resumed := turns[0], turns[1]
	if attrs(paused)["agentry.turn.outcome"].AsString() != "paused" || paused.Status().Code == codes.Error {
		t.Fatalf("paused turn %v %v", attrs(paused), paused.Status())
	}
	childOf(t, resumed, paused)
	if l := resumed.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != paused.SpanContext().SpanID() {
		t.Fatalf("links %v", l)
	}
	if !attrs(resumed)["agentry.turn.resumed"].AsBool() {
		t.Fatal("the resumed turn does not say so")
	}
	// The tool call the pause interrupted ended with the paused turn.
	if toolSpan == nil || toolSpan.Status().Code != codes.Error || !toolSpan.EndTime().Equal(paused.EndTime()) {
		t.Fatalf("interrupted tool span %v", toolSpan)
	}
}

func TestErrorsAndReconstructedSpans(t *testing.T) {
	t.Parallel()
	h := newHarness(t, otel.Options{})
	h.emit("r1", event.TypeTurnStart, &event.TurnStart{})
	// Ends without starts: spans are rebuilt from the durations.
	llmEnd := h.emit("r1", event.TypeLLMEnd, &event.LLMEnd{Model: "m", Iteration: 1, DurationMs: 250, Error: "rate limited"})
	toolEnd := h.emit("r1", tool.TypeCallEnd, &tool.CallEnd{Tool: "t", ToolCallID: "c9", DurationMs: 1500, IsError: true, ErrorClass: "invalid_arguments"})
	h.emit("r1", event.TypeTurnEnd, &event.TurnEnd{Outcome: event.OutcomeError, Error: "the model failed"})

	byName := h.ended()
	chat, toolSpan, turn := byName["chat m"], byName["execute_tool t"], byName["invoke_agent analyst"]
	if chat == nil || toolSpan == nil || turn == nil {
		t.Fatalf("spans %v", names(h.spans.Ended()))
	}
	if !chat.StartTime().Equal(llmEnd.Add(-250*time.Millisecond)) || chat.Status().Code != codes.Error || chat.Status().Description != "rate limited" {
		t.Fatalf("chat %v → %v %v", chat.StartTime(), chat.EndTime(), chat.Status())
	}
	if !toolSpan.StartTime().Equal(toolEnd.Add(-1500*time.Millisecond)) || attrs(toolSpan)["error.type"].AsString() != "invalid_arguments" || toolSpan.Status().Code != codes.Error {
		t.Fatalf("tool %v %v", attrs(toolSpan), toolSpan.Status())
	}
	if turn.Status().Code != codes.Error || turn.Status().Description != "the model failed" {
		t.Fatalf("turn status %v", turn.Status())
	}
}

func TestCloseEndsOpenSpansAndEvictionBoundsMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, otel.Options{MaxRuns: 2})
	h.emit("r1", event.TypeTurnStart, &event.TurnStart{})
	h.emit("r2", event.TypeTurnStart, &event.TurnStart{})
	h.emit("r2", event.TypeLLMStart, &event.LLMStart{Iteration: 1})
	h.emit("r3", event.TypeTurnStart, &event.TurnStart{}) // evicts r1, the least recently active
	ended := h.spans.Ended()
	if len(ended) != 1 || ended[0].Status().Code != codes.Error || !strings.Contains(ended[0].Status().Description, "MaxRuns") ||
		attrs(ended[0])["agentry.run.id"].AsString() != "r1" {
		t.Fatalf("after eviction: %v", names(ended))
	}
	if err := h.sink.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	h.emit("r4", event.TypeTurnStart, &event.TurnStart{})                               // ignored
	h.emit("r4", tool.TypeSessionStarted, &tool.SessionOpened{Tool: "t", Scope: "run"}) // ignored
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := sum(t, rm, "agentry.tool_sessions.opened"); n != 0 {
		t.Fatalf("a session opened after Close was counted (%d)", n)
	}
	if n, m := len(h.spans.Started()), len(h.spans.Ended()); n != 5 || m != 5 {
		t.Fatalf("%d started, %d ended; want every span ended at Close and nothing after", n, m)
	}
	for _, s := range h.spans.Ended()[1:] {
		if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "sink closed") {
			t.Fatalf("%s: %v", s.Name(), s.Status())
		}
	}
}

func TestEventsWithoutARunMakeNoSpans(t *testing.T) {
	t.Parallel()
	h := newHarness(t, otel.Options{})
	h.emit("", event.TypeTurnStart, &event.TurnStart{})
	h.emit("", tool.TypeCallStart, &tool.CallStart{Tool: "t", ToolCallID: "c"})
	if n := len(h.spans.Started()); n != 0 {
		t.Fatalf("%d spans for events without a run id", n)
	}
}

// sum returns the value of a counter (or up-down counter) for the data
// point whose attributes include all of want.
func sum(t *testing.T, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			s, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T", name, m.Data)
			}
			var total int64
			for _, dp := range s.DataPoints {
				if hasAll(dp.Attributes, want) {
					total += dp.Value
				}
			}
			return total
		}
	}
	return 0
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (count uint64, total float64) {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch h := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range h.DataPoints {
					if hasAll(dp.Attributes, want) {
						count += dp.Count
						total += dp.Sum
					}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range h.DataPoints {
					if hasAll(dp.Attributes, want) {
						count += dp.Count
						total += float64(dp.Sum)
					}
				}
			default:
				t.Fatalf("%s is %T", name, m.Data)
			}
		}
	}
	return count, total
}

func TestSessionAndGenAIMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, otel.Options{})
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(h.sink, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	open := func(name, scope string, reused bool) {
		typ := tool.TypeSessionStarted
		if reused {
			typ = tool.TypeSessionReused
		}
		bus.Export(event.Event{Type: typ, Payload: &tool.SessionOpened{Tool: name, Scope: scope, KeyHash: "k"}})
	}
	closeEv := func(name, scope, reason string, failed bool, tookMs float64) {
		typ, class := tool.TypeSessionClosed, ""
		if failed {
			typ, class = tool.TypeSessionCloseFailed, "timeout"
		}
		bus.Export(event.Event{Type: typ, Payload: &tool.SessionClosed{Tool: name, Scope: scope, KeyHash: "k", Reason: reason,
			TookMs: tookMs, HeldMs: 60000, ErrorClass: class}})
	}
	open("run_code", "run", false)
	open("run_code", "run", true)
	open("run_code", "run", true)
	open("browser", "session", false)
	open("browser", "session", false)
	closeEv("run_code", "run", "run-end", false, 20)
	closeEv("browser", "session", "idle", true, 5000)
	bus.Export(event.Event{Type: event.TypeLLMEnd, Payload: &event.LLMEnd{Model: "m", DurationMs: 1500, InputTokens: 100, OutputTokens: 7}, Meta: event.Meta{RunID: "r"}})
	bus.Export(event.Event{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{Tool: "run_code", DurationMs: 250}, Meta: event.Meta{RunID: "r"}})

	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	toolScope := func(name, scope string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("agentry.tool", name), attribute.String("agentry.scope", scope)}
	}
	checks := []struct {
		name string
		got  int64
		want int64
	}{
		{"live run_code/run", sum(t, rm, "agentry.tool_sessions.live", toolScope("run_code", "run")...), 0},
		{"live browser/session", sum(t, rm, "agentry.tool_sessions.live", toolScope("browser", "session")...), 1},
		{"opened run_code", sum(t, rm, "agentry.tool_sessions.opened", toolScope("run_code", "run")...), 1},
		{"opened browser", sum(t, rm, "agentry.tool_sessions.opened", toolScope("browser", "session")...), 2},
		{"reused", sum(t, rm, "agentry.tool_sessions.reused", toolScope("run_code", "run")...), 2},
		{"closed run-end", sum(t, rm, "agentry.tool_sessions.closed", attribute.String("agentry.reason", "run-end")), 1},
		{"closed idle", sum(t, rm, "agentry.tool_sessions.closed", attribute.String("agentry.reason", "idle")), 0},
		{"failed timeout", sum(t, rm, "agentry.tool_sessions.close_failures", attribute.String("agentry.reason", "idle"), attribute.String("error.type", "timeout")), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if n, s := histogram(t, rm, "agentry.tool_sessions.teardown.duration"); n != 2 || s != 5.02 {
		t.Errorf("teardown histogram: %d values summing to %v, want 2 and 5.02s", n, s)
	}
	if n, _ := histogram(t, rm, "agentry.tool_sessions.teardown.duration", attribute.String("agentry.outcome", "failed")); n != 1 {
		t.Errorf("failed teardowns: %d", n)
	}
	if n, s := histogram(t, rm, "gen_ai.client.operation.duration", attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.request.model", "m")); n != 1 || s != 1.5 {
		t.Errorf("chat duration: %d, %v", n, s)
	}
	if n, s := histogram(t, rm, "gen_ai.client.operation.duration", attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", "run_code")); n != 1 || s != 0.25 {
		t.Errorf("tool duration: %d, %v", n, s)
	}
	if n, s := histogram(t, rm, "gen_ai.client.token.usage", attribute.String("gen_ai.token.type", "input")); n != 1 || s != 100 {
		t.Errorf("input tokens: %d, %v", n, s)
	}
	// No metric attribute carries a key hash or an id.
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if strings.Contains(m.Name, "tool_sessions") {
				for _, dp := range dataPointAttrs(m.Data) {
					for _, kv := range dp.ToSlice() {
						if strings.Contains(string(kv.Key), "key") || strings.HasSuffix(string(kv.Key), ".id") {
							t.Errorf("%s carries %s", m.Name, kv.Key)
						}
					}
				}
			}
		}
	}
}

func dataPointAttrs(d metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := d.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}
