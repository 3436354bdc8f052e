package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/tool"
)

// The demo writes its events with --events, and the three commands read
// them consistently: the audit finds zero leaks and no failed close, in
// text and JSON, and exits 0; stats counts the same events.
func TestDemoEventsAreAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "demo.ndjson")
	if out, err := execute(t, "demo", "--events", path); err != nil {
		t.Fatalf("demo --events: %v\n%s", err, out)
	}
	out, err := execute(t, "events", "audit", "--json", path)
	var r audit.Report
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("--json is not JSON: %v\n%s", jerr, out)
	}
	if r.Events == 0 || r.BadLines != 0 {
		t.Fatalf("report %+v", r)
	}
	if err != nil || r.Problems() || len(r.FailedCloses) != 0 || len(r.Tools) != 1 || r.Tools[0].Opened != 3 {
		t.Fatalf("audit --json: exit %d, report %+v", exitCode(err), r)
	}
	closed := r.Tools[0].Closed
	if closed["session-end"] != 1 || closed["idle"] != 1 || closed["shutdown"] != 1 {
		t.Fatalf("closes by reason %v, want one each of session-end, idle and shutdown", closed)
	}
	text, err := execute(t, "events", "audit", path)
	if err != nil || !strings.Contains(text, "result: every session closed") ||
		!strings.Contains(text, "idle=1 session-end=1 shutdown=1") {
		t.Fatalf("audit exit %d\n%s", exitCode(err), text)
	}
	out, err = execute(t, "events", "stats", "--json", path)
	var sum audit.Summary
	if err != nil || json.Unmarshal([]byte(out), &sum) != nil || sum.Events != r.Events {
		t.Fatalf("stats: %v, %d events vs the audit's %d\n%s", err, sum.Events, r.Events, out)
	}
}

func writeEvents(t *testing.T, path string, evs ...event.Event) {
	t.Helper()
	s, err := ndjson.Open(path, ndjson.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		s.Export(e)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEventsAuditCleanLeakAndMissing(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	started := event.Event{Type: tool.TypeSessionStarted, Payload: &tool.SessionOpened{Tool: "run_code", Scope: "run", KeyHash: "3fa94c0d2b1e"},
		Meta: event.Meta{RunID: "run-7", Time: at}}
	answered := event.Event{Type: event.TypeTurnEnd, Payload: &event.TurnEnd{Outcome: "answer"}, Meta: event.Meta{RunID: "run-7", Time: at}}
	closed := event.Event{Type: tool.TypeSessionClosed, Payload: &tool.SessionClosed{Tool: "run_code", Scope: "run", KeyHash: "3fa94c0d2b1e", Reason: "run-end"},
		Meta: event.Meta{RunID: "run-7", Time: at}}

	clean := filepath.Join(dir, "clean.ndjson")
	writeEvents(t, clean, started, answered, closed)
	out, err := execute(t, "events", "audit", clean)
	if err != nil || !strings.Contains(out, "result: every session closed") || !strings.Contains(out, "run-end=1") {
		t.Fatalf("clean audit: %v\n%s", err, out)
	}

	leak := filepath.Join(dir, "leak.ndjson")
	writeEvents(t, leak, started, answered)
	out, err = execute(t, "events", "audit", leak)
	if exitCode(err) != 1 {
		t.Fatalf("leak audit exit %d", exitCode(err))
	}
	for _, want := range []string{
		"SESSIONS STILL OPEN AT THE END (1)",
		"keyHash=3fa94c0d2b1e tool=run_code scope=run run=run-7",
		"RUNS THAT ENDED WITH RUN-SCOPED SESSIONS OPEN (1)",
		"run=run-7 ended answer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("leak audit lacks %q\n%s", want, out)
		}
	}

	if _, err := execute(t, "events", "audit", filepath.Join(dir, "missing.ndjson")); exitCode(err) != 1 {
		t.Fatalf("a missing file: exit %d", exitCode(err))
	}
	if _, err := execute(t, "events", "audit"); exitCode(err) != 2 {
		t.Fatalf("no file: exit %d, want a usage error", exitCode(err))
	}
}

func TestEventsStatsPrintsPercentiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.ndjson")
	var evs []event.Event
	for i := 1; i <= 100; i++ {
		evs = append(evs, event.Event{Type: event.TypeLLMEnd, Payload: &event.LLMEnd{DurationMs: float64(i)}, Meta: event.Meta{RunID: "r"}})
	}
	writeEvents(t, path, evs...)
	out, err := execute(t, "events", "stats", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "llm calls    100  50ms  95ms  99ms  100ms") || !strings.Contains(out, "100  agentry.llm.end") {
		t.Fatalf("stats:\n%s", out)
	}
	out, err = execute(t, "events", "stats", "--json", path)
	var s audit.Summary
	if err != nil || json.Unmarshal([]byte(out), &s) != nil || s.LLM.P99 != 99 {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
}

// syncBuffer is a bytes.Buffer safe for the command and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestEventsTailFollows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.ndjson")
	sink, err := ndjson.Open(path, ndjson.Options{MaxBytes: 400, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	emit := func(name string) {
		sink.Export(event.Event{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{Tool: name, ToolCallID: "c1"}, Meta: event.Meta{RunID: "r1"}})
		if err := sink.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	emit("before-1")
	emit("before-2")

	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"events", "tail", "-n", "1", "--poll", "2ms", path})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitFor := func(s string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !strings.Contains(out.String(), s) {
			select {
			case err := <-done:
				t.Fatalf("tail ended: %v\n%s", err, out.String())
			case <-deadline:
				t.Fatalf("tail never printed %q:\n%s", s, out.String())
			case <-time.After(time.Millisecond):
			}
		}
	}
	waitFor("tool=before-2")
	for i := range 6 { // past MaxBytes: the sink rotates under tail
		emit("after-" + string(rune('a'+i)))
		waitFor("tool=after-" + string(rune('a'+i)))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "before-1") || strings.Contains(got, "\x1b[") {
		t.Fatalf("tail printed the wrong lines or colour into a non-terminal:\n%s", got)
	}
	if n := strings.Count(got, "\n"); n != 7 {
		t.Fatalf("%d lines, want 7:\n%s", n, got)
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Fatal("the sink never rotated; the test did not follow a rotation")
	}
}

func TestColorChoice(t *testing.T) {
	var buf bytes.Buffer
	if c, _ := useColor("auto", &buf); c {
		t.Error("colour into a buffer")
	}
	if c, _ := useColor("always", &buf); !c {
		t.Error("--color always")
	}
	if _, err := useColor("rainbow", &buf); exitCode(err) != 2 {
		t.Error("a bad --color is a usage error")
	}
	// /dev/null is a character device but not a terminal.
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if c, _ := useColor("auto", f); c {
		t.Error("colour into /dev/null")
	}
}

func TestDemoOTelFlag(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	events := filepath.Join(t.TempDir(), "demo.ndjson")
	out, err := execute(t, "demo", "--otel", "--events", events)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "http/protobuf") {
		t.Fatalf("demo --otel with grpc: %v\n%s", err, out)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	if out, err := execute(t, "demo", "--otel", "--events", events); err != nil {
		t.Fatalf("demo --otel: %v\n%s", err, out)
	}
}
