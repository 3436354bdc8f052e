package ndjson_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/tool"
)

// turnEvents is one realistic turn: the shape (≈ 240-byte lines) the
// throughput targets are quoted on.
func turnEvents() []event.Event {
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.UTC)
	meta := event.Meta{RunID: "run-5f0c2a7e-9b1d-4c3e-8f6a-2d7b9e1c4a55", SessionID: "conv-8d2e4f6a-1b3c-4d5e-9f7a-0b1c2d3e4f5a",
		Tenant: "acme", Principal: "alice", AgentID: "analyst"}
	exit := 0
	evs := []event.Event{
		{Type: event.TypeTurnStart, Payload: &event.TurnStart{MessageChars: 412, Tools: 3}},
		{Type: event.TypeLLMStart, Payload: &event.LLMStart{Model: "claude-sonnet-4-5", Iteration: 1, Messages: 3, Tools: 3}},
		{Type: event.TypeLLMEnd, Payload: &event.LLMEnd{Model: "claude-sonnet-4-5", Iteration: 1, DurationMs: 1834.25, InputTokens: 2210, OutputTokens: 187, StopReason: "tool_use", ToolCalls: 1}},
		{Type: tool.TypeCallStart, Payload: &tool.CallStart{Tool: "run_code", ToolCallID: "toolu_01A9xQ3mZk7c", Iteration: 1}},
		{Type: tool.TypeSessionStarted, Payload: &tool.SessionOpened{Tool: "run_code", Scope: "run", KeyHash: "3fa94c0d2b1e", RunnerID: "local-python", Label: "python", Calls: 1}},
		{Type: code.TypeRun, Payload: &code.RunReport{Tool: "run_code", RunnerID: "local-python", Language: "python", OK: true, ExitCode: &exit, OutputChars: 918, StagedInputs: 1, ShapeHash: "9c1d7e20ab44", DurationMs: 412.5}},
		{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{Tool: "run_code", ToolCallID: "toolu_01A9xQ3mZk7c", DurationMs: 455.125}},
		{Type: tool.TypeSessionClosed, Payload: &tool.SessionClosed{Tool: "run_code", Scope: "run", KeyHash: "3fa94c0d2b1e", RunnerID: "local-python", Label: "python", Reason: "run-end", HeldMs: 2611.5, TookMs: 12.25}},
		{Type: event.TypeTurnEnd, Payload: &event.TurnEnd{Outcome: "answer", Iterations: 2, DurationMs: 4421.75}},
	}
	for i := range evs {
		evs[i].Meta = meta
		evs[i].Meta.Seq = uint64(1000 + i)
		evs[i].Meta.Time = at.Add(time.Duration(i) * time.Millisecond)
	}
	return evs
}

func benchPath(b *testing.B) string {
	return filepath.Join(b.TempDir(), "events.ndjson")
}

// BenchmarkThroughput writes the same events to a file three ways, in one
// run, so that the figures compare: this sink; log/slog's JSON handler
// through a 64 KiB bufio.Writer with the payload given as typed attributes
// (slog's fastest form); and json.Marshal through the same bufio.Writer.
func BenchmarkThroughput(b *testing.B) {
	b.Run("ndjson", benchSink)
	b.Run("slog-json", benchSlog)
	b.Run("encoding-json", benchEncodingJSON)
}

func perEventBytes() int64 {
	evs := turnEvents()
	var n int
	for _, e := range evs {
		l, _ := json.Marshal(e)
		n += len(l) + 1
	}
	return int64(n / len(evs))
}

func benchSink(b *testing.B) {
	evs := turnEvents()
	perEvent := perEventBytes()
	// A queue deep enough that a writer starved by a busy machine does not
	// drop: the figure is events on disk per second, Close included.
	s, err := ndjson.Open(benchPath(b), ndjson.Options{MaxQueuedBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(perEvent)
	i := 0
	for b.Loop() {
		s.Export(evs[i%len(evs)])
		i++
	}
	if err := s.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	st := s.Stats()
	if st.Dropped != 0 || st.Written != uint64(i) {
		b.Fatalf("stats %+v after %d exports: the writer fell behind", st, i)
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "events/s")
}

func benchSlog(b *testing.B) {
	evs := turnEvents()
	perEvent := perEventBytes()
	f, err := os.Create(benchPath(b))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	logger := slog.New(slog.NewJSONHandler(w, nil))
	attrs := make([][]slog.Attr, len(evs))
	for i, e := range evs {
		attrs[i] = slogAttrs(e)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(perEvent)
	i := 0
	for b.Loop() {
		k := i % len(evs)
		logger.LogAttrs(ctx, slog.LevelInfo, string(evs[k].Type), attrs[k]...)
		i++
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "events/s")
}

func benchEncodingJSON(b *testing.B) {
	evs := turnEvents()
	perEvent := perEventBytes()
	f, err := os.Create(benchPath(b))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	enc := json.NewEncoder(w)
	b.ReportAllocs()
	b.SetBytes(perEvent)
	i := 0
	for b.Loop() {
		if err := enc.Encode(evs[i%len(evs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "events/s")
}

// TestThroughputTargets checks the targets, measured in one run:
// the sink at least twice as fast as slog's JSON handler on the same
// events, and at least 1.3M events/s, each the best of five alternating
// runs. Timing on a shared machine is noisy, so it runs only when asked:
//
//	AGENTRY_BENCH_TARGETS=1 go test -run ThroughputTargets -v ./event/ndjson
func TestThroughputTargets(t *testing.T) {
	if os.Getenv("AGENTRY_BENCH_TARGETS") == "" {
		t.Skip("set AGENTRY_BENCH_TARGETS=1 to measure the throughput targets")
	}
	// Alternate the two and keep each one's best of five: on a shared
	// machine, interference only ever slows a run down.
	rate := func(r testing.BenchmarkResult) float64 { return float64(r.N) / r.T.Seconds() }
	var sink, slogr float64
	for range 5 {
		sink = max(sink, rate(testing.Benchmark(benchSink)))
		slogr = max(slogr, rate(testing.Benchmark(benchSlog)))
	}
	ratio := sink / slogr
	t.Logf("ndjson %.0f events/s, slog JSON %.0f events/s: %.2f× (target ≥ 2×, ≥ 1.3M events/s)", sink, slogr, ratio)
	if ratio < 2 {
		t.Errorf("the sink is %.2f× slog, want ≥ 2×", ratio)
	}
	if sink < 1.3e6 {
		t.Errorf("the sink writes %.0f events/s, want ≥ 1.3M", sink)
	}
}

// slogAttrs gives slog the event as typed attributes: the payload's fields
// in a "payload" group and the meta in a "meta" group.
func slogAttrs(e event.Event) []slog.Attr {
	var m map[string]any
	raw, _ := json.Marshal(e.Payload)
	_ = json.Unmarshal(raw, &m)
	var p []any
	for k, v := range m {
		switch v := v.(type) {
		case string:
			p = append(p, slog.String(k, v))
		case float64:
			if v == float64(int64(v)) {
				p = append(p, slog.Int64(k, int64(v)))
			} else {
				p = append(p, slog.Float64(k, v))
			}
		case bool:
			p = append(p, slog.Bool(k, v))
		}
	}
	return []slog.Attr{
		slog.Group("payload", p...),
		slog.Group("meta",
			slog.String("runId", e.Meta.RunID), slog.String("sessionId", e.Meta.SessionID),
			slog.String("tenant", e.Meta.Tenant), slog.String("principal", e.Meta.Principal),
			slog.String("agentId", e.Meta.AgentID), slog.Uint64("seq", e.Meta.Seq), slog.Time("time", e.Meta.Time)),
	}
}

// BenchmarkRotation measures the writer on the rotating path: each
// iteration exports 1,000 events (≈ 240 KB) and flushes them. "every-1MiB"
// rotates every four or five batches, splitting the batch that crosses the
// ceiling at a line boundary; "never" has a ceiling it never reaches, so
// every write is whole. Same events, same run: the ratio is the cost of
// rotating and splitting.
func BenchmarkRotation(b *testing.B) {
	for _, bc := range []struct {
		name    string
		ceiling int64
	}{{"never", 1 << 40}, {"every-1MiB", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			evs := turnEvents()
			const batch = 1000
			s, err := ndjson.Open(benchPath(b), ndjson.Options{MaxBytes: bc.ceiling, MaxBufferEvents: 2 * batch,
				MaxBufferBytes: 1 << 20, FlushInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetBytes(perEventBytes() * batch)
			for b.Loop() {
				for i := range batch {
					s.Export(evs[i%len(evs)])
				}
				if err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Close(ctx); err != nil {
				b.Fatal(err)
			}
			st := s.Stats()
			if st.Dropped != 0 || bc.ceiling == 1<<20 && st.Rotations == 0 {
				b.Fatalf("stats %+v", st)
			}
			b.ReportMetric(float64(st.Written)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
