package host

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ev(typ event.Type, session, run string, at time.Duration, p any) event.Event {
	return event.Event{Type: typ, Payload: p, Meta: event.Meta{SessionID: session, RunID: run, Tenant: "acme", Principal: "alice", Time: t0.Add(at)}}
}

var alice = tool.Identity{Tenant: "acme", Principal: "alice"}

// The record is bounded everywhere: runs per conversation, events per run
// (the rest counted), closed tool sessions, conversations; and it keeps no
// content.
func TestRecordBounds(t *testing.T) {
	rc := newRecord()
	for i := range recordRuns + 4 {
		rc.observe(ev(event.TypeTurnStart, "ses_a", fmt.Sprintf("run-%d", i), time.Duration(i), &event.TurnStart{}))
	}
	for range recordRunEvents + 7 {
		rc.observe(ev(tool.TypeCallStart, "ses_a", "run-big", 0, &tool.CallStart{Tool: "t"}))
	}
	rc.observe(ev(event.TypeLLMDelta, "ses_a", "run-big", 0, &event.LLMDelta{Text: "secret"}))
	rc.observe(ev(event.TypeLLMMessage, "ses_a", "run-big", 0, &event.LLMMessage{Content: "secret"}))
	for i := range recordClosed + 3 {
		rc.observe(ev(tool.TypeSessionClosed, "ses_a", "", time.Duration(i), &tool.SessionClosed{Tool: "t", KeyHash: fmt.Sprint(i), Reason: "run-end"}))
	}
	_, closed, runs := rc.conv("ses_a", alice, t0)
	if len(runs) != recordRuns || runs[0].id != "run-5" || runs[len(runs)-1].id != "run-big" {
		t.Fatalf("%d runs kept, first %s", len(runs), runs[0].id)
	}
	big := runs[len(runs)-1]
	if len(big.events) != recordRunEvents || big.dropped != 7 {
		t.Fatalf("the big run kept %d events, dropped %d", len(big.events), big.dropped)
	}
	b, _ := json.Marshal(big.events)
	if bytes.Contains(b, []byte("secret")) {
		t.Fatal("the record kept content")
	}
	if len(closed) != recordClosed || closed[0].KeyHash != "3" {
		t.Fatalf("%d closed kept, oldest %s", len(closed), closed[0].KeyHash)
	}

	// Conversations: the least recently active goes first.
	for i := range recordConversations + 1 {
		rc.observe(ev(TypeConversationOpened, fmt.Sprintf("ses_%d", i), "", time.Hour+time.Duration(i), &ConversationEvent{}))
	}
	if len(rc.convs) != recordConversations {
		t.Fatalf("%d conversations kept", len(rc.convs))
	}
	if _, _, r := rc.conv("ses_a", alice, t0); r != nil {
		t.Fatal("the coldest conversation was kept")
	}
	if _, ok := rc.convs[fmt.Sprintf("ses_%d", recordConversations)]; !ok {
		t.Fatal("the newest conversation was dropped")
	}
}

// A conversation whose events name another owner shows nothing, even if
// asked for by id.
func TestRecordOwner(t *testing.T) {
	rc := newRecord()
	rc.observe(ev(tool.TypeSessionStarted, "ses_a", "run-1", 0, &tool.SessionOpened{Tool: "t", KeyHash: "k"}))
	if live, _, runs := rc.conv("ses_a", tool.Identity{Tenant: "acme", Principal: "bob"}, t0); live != nil || runs != nil {
		t.Fatal("bob saw alice's record")
	}
	if live, _, _ := rc.conv("ses_a", alice, t0.Add(time.Second)); len(live) != 1 || live[0].HeldMs != 1000 {
		t.Fatalf("alice's live sessions: %+v", live)
	}
}

// Ends without starts, starts without ends, and a clock that runs
// backwards still give a waterfall with no negative bar.
func TestTimelineUnmatched(t *testing.T) {
	events := []event.Event{
		ev(tool.TypeCallEnd, "s", "r", 10*time.Millisecond, &tool.CallEnd{Tool: "orphan", ToolCallID: "x", DurationMs: 4}),
		ev(event.TypeLLMStart, "s", "r", 20*time.Millisecond, &event.LLMStart{Iteration: 0}),
		ev(code.TypeRun, "s", "r", 5*time.Millisecond, &code.RunReport{RunnerID: "interp", Language: "python", OK: true, DurationMs: 50}),
		ev(tool.TypeCallStart, "s", "r", 30*time.Millisecond, &tool.CallStart{Tool: "t", ToolCallID: "y"}),
		ev(tool.TypeCallEnd, "s", "r", 25*time.Millisecond, &tool.CallEnd{Tool: "t", ToolCallID: "y"}),
	}
	tl := buildTimeline(runRecord{id: "r", events: events}, t0.Add(100*time.Millisecond))
	checkTimeline(t, tl)
	if len(tl.Spans) != 4 {
		t.Fatalf("spans: %+v", tl.Spans)
	}
	if s := tl.Spans[0]; s.Name != "orphan" || s.DurationMs != 4 || s.StartMs != 1 {
		t.Fatalf("an end without a start: %+v", s)
	}
	if s := tl.Spans[1]; !s.Open || s.StartMs != 15 || s.DurationMs != 80 {
		t.Fatalf("a start without an end: %+v", s)
	}
	if s := tl.Spans[3]; s.DurationMs != 0 {
		t.Fatalf("an end before its start: %+v", s)
	}
}

func checkTimeline(t *testing.T, tl timeline) {
	t.Helper()
	ok := func(v float64) bool { return v >= 0 && !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !ok(tl.DurationMs) {
		t.Fatalf("run duration %v", tl.DurationMs)
	}
	for _, s := range tl.Spans {
		if !ok(s.StartMs) || !ok(s.DurationMs) || s.StartMs+s.DurationMs > tl.DurationMs*(1+1e-9)+1e-9 {
			t.Fatalf("span %+v in a run of %v ms", s, tl.DurationMs)
		}
	}
	for _, m := range tl.Marks {
		if !ok(m.AtMs) || m.AtMs > tl.DurationMs*(1+1e-9)+1e-9 {
			t.Fatalf("mark %+v in a run of %v ms", m, tl.DurationMs)
		}
	}
	if tl.Spans == nil || tl.Marks == nil {
		t.Fatal("nil lists encode as null")
	}
	if _, err := json.Marshal(tl); err != nil {
		t.Fatalf("the timeline does not encode: %v", err)
	}
}

// The timeline builder reads events from many emitters; whatever order,
// times and payloads they carry, it gives a waterfall that encodes and has
// no negative or overflowing bar.
func FuzzBuildTimeline(f *testing.F) {
	f.Add([]byte(`{"type":"agentry.agent.turn_start","payload":{},"meta":{"runId":"r","time":"2026-01-02T03:04:05Z"}}
{"type":"agentry.llm.start","payload":{"iteration":0},"meta":{"runId":"r","time":"2026-01-02T03:04:05.001Z"}}
{"type":"agentry.llm.end","payload":{"iteration":0,"durationMs":1,"stopReason":"tool_use"},"meta":{"runId":"r","time":"2026-01-02T03:04:05.002Z"}}
{"type":"agentry.tool.start","payload":{"tool":"run_code","toolCallId":"c"},"meta":{"runId":"r","time":"2026-01-02T03:04:05.003Z"}}
{"type":"agentry.tools.session_started","payload":{"tool":"run_code","keyHash":"abc"},"meta":{"runId":"r","time":"2026-01-02T03:04:05.004Z"}}
{"type":"agentry.tools.code_run","payload":{"runnerId":"i","ok":true,"durationMs":3},"meta":{"runId":"r","time":"2026-01-02T03:04:05.008Z"}}
{"type":"agentry.tool.end","payload":{"tool":"run_code","toolCallId":"c","durationMs":6},"meta":{"runId":"r","time":"2026-01-02T03:04:05.009Z"}}
{"type":"agentry.agent.turn_end","payload":{"outcome":"answer","durationMs":10},"meta":{"runId":"r","time":"2026-01-02T03:04:05.010Z"}}`))
	f.Add([]byte(`{"type":"agentry.tool.end","payload":{"durationMs":-5},"meta":{"time":"2026-01-02T03:04:05Z"}}
{"type":"agentry.pause.request","payload":{"tool":"x"},"meta":{"time":"2001-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"type":"agentry.agent.turn_end","payload":{"durationMs":1e308},"meta":{"time":"2026-01-02T03:04:05Z"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var events []event.Event
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			e, err := event.Decode(sc.Bytes())
			if err != nil {
				continue
			}
			events = append(events, e)
		}
		now := t0.Add(time.Minute)
		for _, e := range events {
			if e.Meta.Time.After(now) {
				now = e.Meta.Time
			}
		}
		checkTimeline(t, buildTimeline(runRecord{id: "r", events: events}, now))
	})
}

// BenchmarkEventSinkExport measures what the console's record adds to every
// event the host routes: /bare is the router with no record, /record with
// one (a run's worth of tool events over 64 conversations).
func BenchmarkEventSinkExport(b *testing.B) {
	events := make([]event.Event, 64)
	for i := range events {
		events[i] = ev(tool.TypeCallEnd, fmt.Sprintf("ses_%02d", i), fmt.Sprintf("run-%02d", i%8), time.Duration(i), &tool.CallEnd{Tool: "run_code", ToolCallID: "c"})
	}
	for _, withRecord := range []bool{false, true} {
		name := "bare"
		if withRecord {
			name = "record"
		}
		b.Run(name, func(b *testing.B) {
			r := NewEventSink()
			if withRecord {
				r.record.Store(newRecord())
			}
			i := 0
			for b.Loop() {
				r.Export(events[i%len(events)])
				i++
			}
		})
	}
}
