package audit_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/tool"
)

func TestPercentilesAreNearestRank(t *testing.T) {
	t.Parallel()
	var ms []float64
	for i := 100; i >= 1; i-- {
		ms = append(ms, float64(i))
	}
	d := audit.Percentiles(ms)
	if d != (audit.Durations{Count: 100, P50: 50, P95: 95, P99: 99, Max: 100}) {
		t.Fatalf("%+v", d)
	}
	if d := audit.Percentiles([]float64{7}); d.P50 != 7 || d.P99 != 7 || d.Count != 1 {
		t.Fatalf("%+v", d)
	}
	if d := audit.Percentiles([]float64{1, 2, 3}); d.P50 != 2 || d.P95 != 3 {
		t.Fatalf("%+v", d)
	}
	if d := audit.Percentiles(nil); d != (audit.Durations{}) {
		t.Fatalf("%+v", d)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s, err := ndjson.Open(path, ndjson.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var seq uint64
	emit := func(run string, p any, typ event.Type) {
		seq++
		s.Export(event.Event{Type: typ, Payload: p, Meta: event.Meta{RunID: run, Seq: seq, Time: at.Add(time.Duration(seq) * time.Second)}})
	}
	for i := 1; i <= 20; i++ {
		run := "r" + string(rune('a'+i%4))
		emit(run, &event.TurnStart{}, event.TypeTurnStart)
		emit(run, &event.LLMEnd{DurationMs: float64(i * 100), InputTokens: 10, OutputTokens: 2}, event.TypeLLMEnd)
		emit(run, &tool.CallEnd{Tool: []string{"a", "b"}[i%2], DurationMs: float64(i)}, tool.TypeCallEnd)
		outcome := event.OutcomeAnswer
		if i == 19 {
			outcome = event.OutcomePaused // run rd's last turn
		}
		emit(run, &event.TurnEnd{Outcome: outcome}, event.TypeTurnEnd)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum := audit.Summarize([]string{path})
	if sum.Events != 80 || sum.Runs != 4 || sum.Outcomes["answer"] != 3 || sum.Outcomes["paused"] != 1 {
		t.Fatalf("%+v", sum)
	}
	if sum.LLM != (audit.Durations{Count: 20, P50: 1000, P95: 1900, P99: 2000, Max: 2000}) {
		t.Fatalf("llm %+v", sum.LLM)
	}
	if sum.Tool.Count != 20 || sum.Tool.P50 != 10 || len(sum.PerTool) != 2 || sum.PerTool[0].Tool != "a" || sum.PerTool[0].Count != 10 || sum.PerTool[0].Max != 20 {
		t.Fatalf("tool %+v per tool %+v", sum.Tool, sum.PerTool)
	}
	if sum.InputTokens != 200 || sum.OutputTokens != 40 {
		t.Fatalf("tokens %d/%d", sum.InputTokens, sum.OutputTokens)
	}
	if len(sum.ByType) != 4 || sum.ByType[0].Count != 20 || sum.ByType[0].Type != string(event.TypeTurnEnd) {
		t.Fatalf("by type %+v", sum.ByType)
	}
	if !sum.First.Equal(at.Add(time.Second)) || !sum.Last.Equal(at.Add(80*time.Second)) {
		t.Fatalf("first %v last %v", sum.First, sum.Last)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	e := event.Event{
		Type: tool.TypeSessionClosed,
		Payload: &tool.SessionClosed{Tool: "run_code", Scope: "run", KeyHash: "3fa94c0d2b1e", Reason: "run-end",
			HeldMs: 2611.5, TookMs: 12.25},
		Meta: event.Meta{RunID: "run-1", SessionID: "conv 1", Seq: 3, Time: time.Date(2026, 11, 30, 9, 1, 2, 345e6, time.UTC)},
	}
	want := `09:01:02.345 tools.session_closed         run=run-1 session="conv 1" tool=run_code scope=run keyHash=3fa94c0d2b1e reason=run-end heldMs=2611.5 tookMs=12.25`
	if got := audit.Format(e, false); got != want {
		t.Fatalf("\n got %q\nwant %q", got, want)
	}
	colored := audit.Format(e, true)
	if !strings.Contains(colored, "\x1b[32m") || !strings.Contains(colored, "run_code") {
		t.Fatalf("colour: %q", colored)
	}
	failed := audit.Format(event.Event{Type: tool.TypeSessionCloseFailed, Payload: &tool.SessionClosed{Error: "boom"}}, true)
	if !strings.Contains(failed, "\x1b[1m\x1b[31m") || !strings.Contains(failed, "error=boom") {
		t.Fatalf("failure: %q", failed)
	}
}

// A payload cannot drive the reader's terminal: control characters are
// quoted, not printed.
func TestFormatDoesNotPassTerminalEscapes(t *testing.T) {
	t.Parallel()
	evil := "\x1b]0;pwned\x07\x1b[2J"
	e := event.Event{Type: event.Type("agentry.tool.end" + evil), Payload: &tool.CallEnd{Tool: evil, ToolCallID: "x\ny"},
		Meta: event.Meta{RunID: evil}}
	for _, color := range []bool{false, true} {
		out := audit.Format(e, color)
		if strings.Contains(out, "\x07") || strings.Contains(out, "\n") || strings.Contains(out, "\x1b]") || strings.Contains(out, "\x1b[2J") {
			t.Fatalf("escape passed through: %q", out)
		}
	}
}
