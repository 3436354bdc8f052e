package audit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// world produces events the way the runtime does: a real tier reporting
// closes, a door emitting opens, an agent emitting turn ends, all through
// a bus into a real NDJSON file.
type world struct {
	t    *testing.T
	bus  *event.Bus
	tier *toolsession.Tier
	sink *ndjson.Sink
	path string
	n    int
}

func newWorld(t *testing.T, opt ndjson.Options) *world {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	sink, err := ndjson.Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, bus: event.NewBus(event.BusOptions{}), sink: sink, path: path}
	if err := w.bus.Add(sink, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	w.tier = toolsession.NewTier(toolsession.Config{Timeout: 50 * time.Millisecond, Report: func(r toolsession.Report) { w.bus.Export(tool.CloseEvent(r)) }})
	t.Cleanup(func() { _ = sink.Close(context.Background()) })
	return w
}

// open registers a session as a tool call in run would, and returns its
// key hash.
func (w *world) open(toolName, runID, sessionID string, scope toolsession.Scope, cleanup func(context.Context) error) string {
	w.n++
	key, ok := toolsession.Key(scope, toolsession.Facts{ToolCallID: "c", RunID: runID, SessionID: sessionID, Tenant: "acme", Principal: "alice"})
	if !ok {
		w.t.Fatalf("no key for scope %s", scope)
	}
	if cleanup == nil {
		cleanup = func(context.Context) error { return nil }
	}
	o := toolsession.Origin{Tool: toolName, ToolCallID: "c", RunID: runID, SessionID: sessionID}
	opt := toolsession.Options{Scope: scope, Key: key, RunnerID: "local"}
	out := w.tier.Register(o, cleanup, opt)
	w.bus.Export(tool.SessionEvent(o, opt, out))
	return out.KeyHash
}

func (w *world) turn(runID, outcome string) {
	w.bus.Export(event.Event{Type: event.TypeTurnStart, Payload: &event.TurnStart{}, Meta: event.Meta{RunID: runID}})
	w.bus.Export(event.Event{Type: event.TypeTurnEnd, Payload: &event.TurnEnd{Outcome: outcome}, Meta: event.Meta{RunID: runID}})
}

func (w *world) done() string {
	if err := w.sink.Flush(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	return w.path
}

func TestAuditOfACleanFile(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ndjson.Options{})
	ctx := context.Background()
	w.open("run_code", "r1", "s1", toolsession.ScopeRun, nil)
	w.open("run_code", "r1", "s1", toolsession.ScopeRun, nil) // reuse
	w.open("browser", "r1", "s1", toolsession.ScopeCall, nil)
	w.tier.FireCall(ctx, "c")
	w.turn("r1", event.OutcomeAnswer)
	w.tier.FireRun(ctx, "r1")
	w.open("run_code", "r2", "s1", toolsession.ScopeSession, nil)
	w.tier.FireSession(ctx, "s1", "")

	r := audit.Audit([]string{w.done()})
	if r.Problems() || len(r.Open) != 0 || len(r.FailedCloses) != 0 || len(r.EndedRuns) != 0 || r.UnmatchedCloses != 0 {
		t.Fatalf("a clean file audited with problems: %+v", r)
	}
	want := map[string]audit.ToolScope{
		"browser/call":     {Opened: 1, Closed: map[string]int{"call-end": 1}},
		"run_code/run":     {Opened: 1, Reused: 1, Closed: map[string]int{"run-end": 1}},
		"run_code/session": {Opened: 1, Closed: map[string]int{"session-end": 1}},
	}
	if len(r.Tools) != len(want) {
		t.Fatalf("tools %+v", r.Tools)
	}
	for _, ts := range r.Tools {
		w := want[ts.Tool+"/"+ts.Scope]
		if ts.Opened != w.Opened || ts.Reused != w.Reused || len(ts.Closed) != 1 || ts.Open != 0 || len(ts.Failed) != 0 {
			t.Fatalf("%s/%s: %+v, want %+v", ts.Tool, ts.Scope, ts, w)
		}
		for reason, n := range w.Closed {
			if ts.Closed[reason] != n {
				t.Fatalf("%s/%s closed %v", ts.Tool, ts.Scope, ts.Closed)
			}
		}
	}
	if r.Events != 9 || len(r.Files) != 1 || r.Files[0].Events != 9 {
		t.Fatalf("events %d, files %+v", r.Events, r.Files)
	}
}

func TestAuditFindsLeaksFailuresAndRunsThatEndedOpen(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ndjson.Options{})
	ctx := context.Background()
	leaked := w.open("browser", "r1", "s1", toolsession.ScopeSession, nil) // never closed
	// A run that answered but whose run-scoped session was never closed.
	forgotten := w.open("run_code", "r2", "s1", toolsession.ScopeRun, nil)
	w.turn("r2", event.OutcomeAnswer)
	// A paused run keeps its session on purpose: open, but not "ended".
	paused := w.open("run_code", "r3", "s1", toolsession.ScopeRun, nil)
	w.turn("r3", event.OutcomePaused)
	// A close that fails.
	failing := w.open("run_code", "r4", "s1", toolsession.ScopeRun, func(context.Context) error { return errors.New("sandbox API said 500") })
	w.turn("r4", event.OutcomeError)
	w.tier.FireRun(ctx, "r4")
	// A run-scoped session that outlived its run until shutdown.
	late := w.open("run_code", "r5", "s1", toolsession.ScopeRun, nil)
	w.turn("r5", event.OutcomeCancelled)
	w.bus.Export(tool.CloseEvent(toolsession.Report{Tool: "run_code", Scope: toolsession.ScopeRun, KeyHash: late, Reason: toolsession.ReasonShutdown, RunID: "r5"}))

	r := audit.Audit([]string{w.done()})
	if !r.Problems() {
		t.Fatal("no problems found")
	}
	open := map[string]audit.Session{}
	for _, s := range r.Open {
		open[s.KeyHash] = s
	}
	if len(open) != 3 {
		t.Fatalf("open %+v, want the leaked, forgotten and paused sessions", r.Open)
	}
	if s := open[leaked]; s.Tool != "browser" || s.Scope != "session" || s.RunID != "r1" || s.SessionID != "s1" || s.SeenFrom != "started" || s.RunState != "" {
		t.Fatalf("leaked: %+v", s)
	}
	if s := open[forgotten]; s.RunState != "answer" || s.Scope != "run" || s.RunID != "r2" {
		t.Fatalf("forgotten: %+v", s)
	}
	if s := open[paused]; s.RunState != "paused" {
		t.Fatalf("paused: %+v", s)
	}
	if len(r.FailedCloses) != 1 {
		t.Fatalf("failed closes %+v", r.FailedCloses)
	}
	if f := r.FailedCloses[0]; f.KeyHash != failing || f.Reason != "run-end" || f.RunID != "r4" || f.ErrorClass != "error" || !strings.Contains(f.Error, "500") {
		t.Fatalf("failed close %+v", f)
	}
	if len(r.EndedRuns) != 2 {
		t.Fatalf("ended runs %+v, want r2 (still open) and r5 (closed by shutdown)", r.EndedRuns)
	}
	byRun := map[string]audit.EndedRun{}
	for _, er := range r.EndedRuns {
		byRun[er.RunID] = er
	}
	if er := byRun["r2"]; er.Outcome != "answer" || len(er.Sessions) != 1 || er.Sessions[0].KeyHash != forgotten || er.Sessions[0].ClosedBy != "" {
		t.Fatalf("r2: %+v", er)
	}
	if er := byRun["r5"]; er.Outcome != "cancelled" || len(er.Sessions) != 1 || er.Sessions[0].ClosedBy != "shutdown" {
		t.Fatalf("r5: %+v", er)
	}
	if _, ok := byRun["r3"]; ok {
		t.Fatal("a paused run is not an ended run")
	}
	for _, ts := range r.Tools {
		if ts.Tool == "run_code" && ts.Scope == "run" && (ts.Opened != 4 || ts.Open != 2 || ts.Failed["run-end"] != 1 || ts.Closed["shutdown"] != 1) {
			t.Fatalf("run_code/run %+v", ts)
		}
	}
}

func TestAuditReadsTheRotatedGeneration(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ndjson.Options{MaxBytes: 700, MaxBufferEvents: 1})
	ctx := context.Background()
	// Flushing after each step makes each its own batch: the open and a
	// turn fill the first generation, the reuse starts the second.
	w.open("run_code", "r1", "s1", toolsession.ScopeSession, nil)
	w.done()
	w.turn("filler", event.OutcomeAnswer)
	w.done()
	w.open("run_code", "r2", "s1", toolsession.ScopeSession, nil)
	w.done()
	w.tier.FireSession(ctx, "s1", "")
	path := w.done()
	old, err := os.ReadFile(path + ".1")
	if err != nil || !strings.Contains(string(old), "session_started") || strings.Contains(string(old), "session_reused") {
		t.Fatalf("the test needs the open alone in .1: %v\n%s", err, old)
	}
	if got := audit.Generations([]string{path}); len(got) != 2 || got[0] != path+".1" || got[1] != path {
		t.Fatalf("generations %v", got)
	}
	if got := audit.Generations([]string{path + ".1", path}); len(got) != 2 || got[0] != path+".1" {
		t.Fatalf("naming .1 too reads it once: %v", got)
	}
	r := audit.Audit([]string{path})
	if r.Problems() || r.UnmatchedCloses != 0 || len(r.Files) != 2 || len(r.Tools) != 1 {
		t.Fatalf("with both generations: %+v", r)
	}
	if ts := r.Tools[0]; ts.Opened != 1 || ts.Reused != 1 || ts.Closed["session-end"] != 1 {
		t.Fatalf("with both generations: %+v", ts)
	}
	// The live file alone sees a reuse and a close: the session is known
	// from its reuse, and nothing is reported missing.
	a := audit.NewAuditor()
	if _, err := ndjson.ScanFile(path, a.Add); err != nil {
		t.Fatal(err)
	}
	if r := a.Report(); r.Problems() || len(r.Tools) != 1 || r.Tools[0].Opened != 0 || r.Tools[0].Reused != 1 {
		t.Fatalf("live file alone: %+v", r)
	}
}

func TestAuditSeesASessionKnownOnlyFromAReuse(t *testing.T) {
	t.Parallel()
	a := audit.NewAuditor()
	a.Add(event.Event{Type: tool.TypeSessionReused, Payload: &tool.SessionOpened{Tool: "t", Scope: "session", KeyHash: "abc123abc123", Calls: 7}, Meta: event.Meta{RunID: "r9"}})
	r := a.Report()
	if len(r.Open) != 1 || r.Open[0].SeenFrom != "reused" || r.Open[0].KeyHash != "abc123abc123" {
		t.Fatalf("%+v", r.Open)
	}
}

func TestAuditCountsBadLinesAndMissingFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	content := `{"type":"agentry.tools.session_started","payload":{"tool":"t","scope":"run","keyHash":"k"},"meta":{"runId":"r","seq":1,"time":"2026-01-01T00:00:00Z"}}` + "\ngarbage\n\x00\x00\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	r := audit.Audit([]string{path, filepath.Join(dir, "nope.ndjson")})
	if r.BadLines != 2 || len(r.Files) != 2 || !r.Files[1].Missing || len(r.Open) != 1 {
		t.Fatalf("%+v", r)
	}
}
