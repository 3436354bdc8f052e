package toolsession_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects reports; safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	reports []toolsession.Report
}

func (r *recorder) report(rep toolsession.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, rep)
}

func (r *recorder) all() []toolsession.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]toolsession.Report(nil), r.reports...)
}

// clock is an injected clock tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func key(t *testing.T, s toolsession.Scope, f toolsession.Facts) string {
	t.Helper()
	k, ok := toolsession.Key(s, f)
	if !ok {
		t.Fatalf("Key(%s, %+v) refused", s, f)
	}
	return k
}

func counting(n *atomic.Int32) func(context.Context) error {
	return func(context.Context) error { n.Add(1); return nil }
}

func TestRegisterStartsThenReusesFirstWins(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{Report: rec.report})
	k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-1", Tenant: "acme", Principal: "bob"})
	origin := toolsession.Origin{Tool: "run_code", ToolCallID: "c1", RunID: "run-1"}

	var first, second atomic.Int32
	out := tier.Register(origin, counting(&first), toolsession.Options{Key: k, RunnerID: "local", Label: "python"})
	if out.Reused || out.Calls != 1 || out.KeyHash != toolsession.HashKey(k) {
		t.Fatalf("first Register = %+v, want a start with calls 1 and the key's hash", out)
	}
	origin.ToolCallID = "c2"
	out = tier.Register(origin, counting(&second), toolsession.Options{Key: k})
	if !out.Reused || out.Calls != 2 || out.KeyHash != toolsession.HashKey(k) {
		t.Fatalf("second Register = %+v, want a reuse with calls 2", out)
	}
	if tier.Live() != 1 {
		t.Fatalf("Live = %d, want 1", tier.Live())
	}
	if n := tier.FireRun(context.Background(), "run-1"); n != 1 {
		t.Fatalf("FireRun closed %d, want 1", n)
	}
	if first.Load() != 1 || second.Load() != 0 {
		t.Fatalf("first cleanup ran %d times, second %d; want the first once and never the second", first.Load(), second.Load())
	}
	reps := rec.all()
	if len(reps) != 1 {
		t.Fatalf("got %d reports, want 1", len(reps))
	}
	r := reps[0]
	if r.Failed || r.Tool != "run_code" || r.Scope != toolsession.ScopeRun || r.Reason != toolsession.ReasonRunEnd ||
		r.RunnerID != "local" || r.Label != "python" || r.RunID != "run-1" || r.KeyHash != toolsession.HashKey(k) {
		t.Fatalf("report = %+v", r)
	}
}

func TestDedupIsPerToolScopeAndKey(t *testing.T) {
	t.Parallel()
	tier := toolsession.NewTier(toolsession.Config{})
	o := toolsession.Origin{Tool: "a", RunID: "r", SessionID: "s"}
	noop := func(context.Context) error { return nil }
	tier.Register(o, noop, toolsession.Options{Key: "k"})
	if tier.Register(toolsession.Origin{Tool: "b", RunID: "r"}, noop, toolsession.Options{Key: "k"}).Reused {
		t.Fatal("another tool reused the session")
	}
	if tier.Register(o, noop, toolsession.Options{Key: "k", Scope: toolsession.ScopeSession}).Reused {
		t.Fatal("another scope reused the session")
	}
	if tier.Register(o, noop, toolsession.Options{Key: "k2"}).Reused {
		t.Fatal("another key reused the session")
	}
	if !tier.Register(o, noop, toolsession.Options{Key: "k", Scope: toolsession.ScopeRun}).Reused {
		t.Fatal("zero scope and ScopeRun should be the same registration")
	}
	// An empty key is never deduplicated.
	if out := tier.Register(o, noop, toolsession.Options{}); out.Reused || out.KeyHash != "" {
		t.Fatalf("empty key: %+v", out)
	}
	if tier.Register(o, noop, toolsession.Options{}).Reused {
		t.Fatal("two registrations with an empty key were merged")
	}
	if got := tier.Live(); got != 6 {
		t.Fatalf("Live = %d, want 6", got)
	}
	tier.FireShutdown(context.Background())
}

func TestFiringSitesSelectByScopeAndOrigin(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{Report: rec.report})
	noop := func(context.Context) error { return nil }
	reg := func(tool string, s toolsession.Scope, callID, runID, sessionID string) {
		tier.Register(toolsession.Origin{Tool: tool, ToolCallID: callID, RunID: runID, SessionID: sessionID}, noop,
			toolsession.Options{Scope: s, Key: tool})
	}
	reg("call-a", toolsession.ScopeCall, "c1", "r1", "s1")
	reg("call-b", toolsession.ScopeCall, "c2", "r1", "s1")
	reg("run-a", toolsession.ScopeRun, "c1", "r1", "s1")
	reg("run-b", toolsession.ScopeRun, "c3", "r2", "s1")
	reg("run-c", toolsession.ScopeRun, "c4", "r3", "")
	reg("sess-a", toolsession.ScopeSession, "c1", "r1", "s1")
	reg("sess-b", toolsession.ScopeSession, "c5", "r4", "s2")
	reg("sess-c", toolsession.ScopeSession, "c6", "r5", "s3")
	reg("shut", toolsession.ScopeShutdown, "c1", "r1", "s1")
	ctx := context.Background()

	steps := []struct {
		name   string
		fire   func() int
		want   []string
		reason toolsession.Reason
	}{
		{"FireCall(c1) takes only call-scoped registrations of c1", func() int { return tier.FireCall(ctx, "c1") }, []string{"call-a"}, toolsession.ReasonCallEnd},
		{"FireCall of an unknown call", func() int { return tier.FireCall(ctx, "nope") }, nil, ""},
		{"FireRun(r1) takes only r1's run-scoped registration", func() int { return tier.FireRun(ctx, "r1") }, []string{"run-a"}, toolsession.ReasonRunEnd},
		{"FireRun(\"\") takes every run-scoped registration", func() int { return tier.FireRun(ctx, "") }, []string{"run-c", "run-b"}, toolsession.ReasonRunEnd},
		{"FireSession(s1) defaults its reason", func() int { return tier.FireSession(ctx, "s1", "") }, []string{"sess-a"}, toolsession.ReasonSessionEnd},
		{"FireSession(s2, evicted)", func() int { return tier.FireSession(ctx, "s2", toolsession.ReasonEvicted) }, []string{"sess-b"}, toolsession.ReasonEvicted},
		{"FireSession(\"\") takes the rest", func() int { return tier.FireSession(ctx, "", "") }, []string{"sess-c"}, toolsession.ReasonSessionEnd},
		{"FireShutdown takes everything left, whatever its scope", func() int { return tier.FireShutdown(ctx) }, []string{"shut", "call-b"}, toolsession.ReasonShutdown},
	}
	for _, st := range steps {
		before := len(rec.all())
		n := st.fire()
		reps := rec.all()[before:]
		if n != len(st.want) || len(reps) != len(st.want) {
			t.Fatalf("%s: closed %d with %d reports, want %d", st.name, n, len(reps), len(st.want))
		}
		got := map[string]bool{}
		for _, r := range reps {
			got[r.Tool] = true
			if r.Reason != st.reason {
				t.Errorf("%s: %s closed with reason %q, want %q", st.name, r.Tool, r.Reason, st.reason)
			}
		}
		for _, w := range st.want {
			if !got[w] {
				t.Errorf("%s: %s was not closed (closed %v)", st.name, w, got)
			}
		}
	}
	if tier.Live() != 0 {
		t.Fatalf("Live = %d after shutdown", tier.Live())
	}
}

func TestLaunchOrderIsNewestFirst(t *testing.T) {
	t.Parallel()
	tier := toolsession.NewTier(toolsession.Config{})
	var mu sync.Mutex
	var order []int
	for i := range 8 {
		tier.Register(toolsession.Origin{Tool: "t", RunID: "r"}, func(context.Context) error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return nil
		}, toolsession.Options{Key: fmt.Sprint(i)})
	}
	tier.FireRun(context.Background(), "r")
	for i, v := range order {
		if v != 7-i {
			t.Fatalf("cleanups started in order %v, want newest first", order)
		}
	}
}

func TestClosesRunConcurrentlyWithinOneTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tier := toolsession.NewTier(toolsession.Config{Timeout: 5 * time.Second, MaxLive: 100, Report: rec.report})
		for i := range 64 {
			// Each Stop takes 4s: serially that is over four minutes.
			tier.Register(toolsession.Origin{Tool: "slow", RunID: "r"}, func(ctx context.Context) error {
				select {
				case <-time.After(4 * time.Second):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, toolsession.Options{Key: fmt.Sprint(i)})
		}
		start := time.Now()
		if n := tier.FireRun(context.Background(), "r"); n != 64 {
			t.Fatalf("closed %d, want 64", n)
		}
		if took := time.Since(start); took != 4*time.Second {
			t.Fatalf("closing 64 sessions of 4s each took %s, want 4s (they must run concurrently)", took)
		}
		for _, r := range rec.all() {
			if r.Failed || r.Took != 4*time.Second {
				t.Fatalf("report %+v, want a 4s success", r)
			}
		}
	})
}

func TestCleanupSeesDeadlineAndIsAbandonedWhenItIgnoresIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tier := toolsession.NewTier(toolsession.Config{Timeout: 2 * time.Second, Report: rec.report})
		release := make(chan struct{})
		type dl struct {
			at time.Time
			ok bool
		}
		seen := make(chan dl, 1)
		registered := time.Now()
		tier.Register(toolsession.Origin{Tool: "stubborn", RunID: "r"}, func(ctx context.Context) error {
			at, ok := ctx.Deadline()
			seen <- dl{at, ok}
			<-release // ignores ctx entirely
			return nil
		}, toolsession.Options{Key: "k"})
		time.Sleep(time.Minute) // fake time: the session is held for a minute

		start := time.Now()
		n := tier.FireRun(context.Background(), "r")
		if n != 1 || time.Since(start) != 2*time.Second {
			t.Fatalf("FireRun = %d after %s; want 1 after exactly the 2s timeout", n, time.Since(start))
		}
		if d := <-seen; !d.ok || !d.at.Equal(start.Add(2*time.Second)) {
			t.Fatalf("cleanup context deadline = %v (%v), want %v", d.at, d.ok, start.Add(2*time.Second))
		}
		reps := rec.all()
		if len(reps) != 1 || !reps[0].Failed {
			t.Fatalf("reports = %+v, want one failure", reps)
		}
		var te *toolsession.TimeoutError
		if !errors.As(reps[0].Err, &te) || te.Tool != "stubborn" || te.Timeout != 2*time.Second {
			t.Fatalf("err = %v, want *TimeoutError for stubborn after 2s", reps[0].Err)
		}
		if !errors.Is(reps[0].Err, context.DeadlineExceeded) {
			t.Fatal("a TimeoutError should match context.DeadlineExceeded")
		}
		if reps[0].Held != start.Sub(registered) || reps[0].Took != 2*time.Second {
			t.Fatalf("Held %s Took %s, want %s and 2s", reps[0].Held, reps[0].Took, start.Sub(registered))
		}
		close(release)
	})
}

func TestCallerContextBoundsTheFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tier := toolsession.NewTier(toolsession.Config{Timeout: time.Hour, Report: rec.report})
		release := make(chan struct{})
		tier.Register(toolsession.Origin{Tool: "hung", RunID: "r"}, func(context.Context) error { <-release; return nil }, toolsession.Options{Key: "k"})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		tier.FireShutdown(ctx)
		if time.Since(start) != 3*time.Second {
			t.Fatalf("shutdown waited %s, want the caller's 3s", time.Since(start))
		}
		reps := rec.all()
		if len(reps) != 1 || !reps[0].Failed || !errors.Is(reps[0].Err, context.DeadlineExceeded) {
			t.Fatalf("reports = %+v, want one failure caused by the caller's deadline", reps)
		}
		close(release)
	})
}

func TestFailuresAndPanicsAreReportedNeverRaised(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{Report: rec.report})
	boom := errors.New("stop failed: connection reset")
	tier.Register(toolsession.Origin{Tool: "err", RunID: "r"}, func(context.Context) error { return boom }, toolsession.Options{Key: "a"})
	tier.Register(toolsession.Origin{Tool: "panic", RunID: "r"}, func(context.Context) error { panic("kaboom") }, toolsession.Options{Key: "b"})
	tier.Register(toolsession.Origin{Tool: "nil", RunID: "r"}, nil, toolsession.Options{Key: "c"})
	if n := tier.FireRun(context.Background(), "r"); n != 3 {
		t.Fatalf("closed %d, want 3", n)
	}
	byTool := map[string]toolsession.Report{}
	for _, r := range rec.all() {
		byTool[r.Tool] = r
	}
	if r := byTool["err"]; !r.Failed || !errors.Is(r.Err, boom) {
		t.Fatalf("error report = %+v", r)
	}
	var pe *toolsession.PanicError
	if r := byTool["panic"]; !r.Failed || !errors.As(r.Err, &pe) || pe.Value != "kaboom" {
		t.Fatalf("panic report = %+v", r)
	}
	if r := byTool["nil"]; r.Failed {
		t.Fatalf("nil cleanup report = %+v", r)
	}
}

func TestPanickingReporterDoesNotBreakTheFiring(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	tier := toolsession.NewTier(toolsession.Config{Report: func(toolsession.Report) { panic("reporter down") }})
	tier.Register(toolsession.Origin{Tool: "t", RunID: "r"}, counting(&ran), toolsession.Options{Key: "a"})
	tier.Register(toolsession.Origin{Tool: "t", RunID: "r"}, counting(&ran), toolsession.Options{Key: "b"})
	if n := tier.FireRun(context.Background(), "r"); n != 2 || ran.Load() != 2 {
		t.Fatalf("closed %d, ran %d; want 2 and 2", n, ran.Load())
	}
}

func TestAtMostOnceWhenShutdownRacesIdleSweep(t *testing.T) {
	t.Parallel()
	for round := range 50 {
		clk := newClock()
		rec := &recorder{}
		tier := toolsession.NewTier(toolsession.Config{Idle: time.Minute, MaxLive: 1000, Now: clk.Now, Report: rec.report})
		const n = 40
		var runs [n]atomic.Int32
		for i := range n {
			tier.Register(toolsession.Origin{Tool: "t", RunID: "r", SessionID: "s"}, counting(&runs[i]),
				toolsession.Options{Key: fmt.Sprint(i), Scope: []toolsession.Scope{toolsession.ScopeRun, toolsession.ScopeSession}[i%2]})
		}
		clk.Advance(2 * time.Minute)
		var wg sync.WaitGroup
		wg.Go(func() { tier.SweepIdle() })
		wg.Go(func() { tier.FireShutdown(context.Background()) })
		wg.Go(func() { tier.FireRun(context.Background(), "") })
		wg.Go(func() { tier.FireSession(context.Background(), "s", "") })
		wg.Go(func() { tier.SweepIdle() })
		wg.Wait()
		if err := tier.Settled(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if got := runs[i].Load(); got != 1 {
				t.Fatalf("round %d: cleanup %d ran %d times, want exactly once", round, i, got)
			}
		}
		if got := len(rec.all()); got != n {
			t.Fatalf("round %d: %d reports, want %d", round, got, n)
		}
	}
}

func TestIdleSweepIsLazyAndRunsBeforeLookup(t *testing.T) {
	t.Parallel()
	clk := newClock()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{Idle: 10 * time.Minute, Now: clk.Now, Report: rec.report})
	var stale, fresh atomic.Int32
	o := toolsession.Origin{Tool: "run_code", RunID: "r", SessionID: "s"}
	tier.Register(o, counting(&stale), toolsession.Options{Key: "k", Scope: toolsession.ScopeSession})

	clk.Advance(9 * time.Minute)
	if !tier.Register(o, counting(&fresh), toolsession.Options{Key: "k", Scope: toolsession.ScopeSession}).Reused {
		t.Fatal("a session touched within the idle bound must be reused")
	}
	clk.Advance(9 * time.Minute) // 9 minutes since the touch: still alive
	tier.SweepIdle()
	if err := tier.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tier.Live() != 1 {
		t.Fatal("a touched session was swept")
	}

	clk.Advance(time.Hour)
	// No timer: nothing happens until the tier is used.
	if tier.Live() != 1 || len(rec.all()) != 0 {
		t.Fatal("the tier closed something without being asked")
	}
	// The expired session must not be handed out once more: the sweep runs
	// before the lookup, so this is a new session.
	out := tier.Register(o, counting(&fresh), toolsession.Options{Key: "k", Scope: toolsession.ScopeSession})
	if out.Reused || out.Calls != 1 {
		t.Fatalf("Register after idle expiry = %+v, want a fresh start", out)
	}
	if err := tier.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
	reps := rec.all()
	if len(reps) != 1 || reps[0].Reason != toolsession.ReasonIdle || stale.Load() != 1 || reps[0].Held != 78*time.Minute {
		t.Fatalf("reports = %+v (stale ran %d), want one idle close held 78m", reps, stale.Load())
	}
	tier.FireShutdown(context.Background())
	if fresh.Load() != 1 {
		t.Fatalf("fresh cleanup ran %d times, want 1", fresh.Load())
	}
}

func TestNegativeIdleDisablesTheSweep(t *testing.T) {
	t.Parallel()
	clk := newClock()
	tier := toolsession.NewTier(toolsession.Config{Idle: -1, Now: clk.Now})
	tier.Register(toolsession.Origin{Tool: "t", RunID: "r"}, nil, toolsession.Options{Key: "k"})
	clk.Advance(1000 * time.Hour)
	tier.SweepIdle()
	if tier.Live() != 1 {
		t.Fatal("the sweep ran although Idle < 0")
	}
	tier.FireShutdown(context.Background())
}

func TestEvictsColdestPastMaxLive(t *testing.T) {
	t.Parallel()
	clk := newClock()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{MaxLive: 3, Now: clk.Now, Report: rec.report})
	reg := func(k string) toolsession.Outcome {
		return tier.Register(toolsession.Origin{Tool: "t", RunID: "r-" + k}, nil, toolsession.Options{Key: k})
	}
	reg("a")
	clk.Advance(time.Second)
	reg("b")
	clk.Advance(time.Second)
	reg("c")
	clk.Advance(time.Second)
	reg("a") // touch: b is now the coldest
	clk.Advance(time.Second)
	reg("d")
	if err := tier.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
	reps := rec.all()
	if len(reps) != 1 || reps[0].Reason != toolsession.ReasonEvicted || reps[0].RunID != "r-b" {
		t.Fatalf("reports = %+v, want b evicted", reps)
	}
	if tier.Live() != 3 {
		t.Fatalf("Live = %d, want 3", tier.Live())
	}

	// Equal touch times: the oldest registration goes first.
	clk2 := newClock()
	rec2 := &recorder{}
	tier2 := toolsession.NewTier(toolsession.Config{MaxLive: 2, Now: clk2.Now, Report: rec2.report})
	for _, k := range []string{"x", "y"} {
		tier2.Register(toolsession.Origin{Tool: "t", RunID: k}, nil, toolsession.Options{Key: k})
	}
	tier2.Register(toolsession.Origin{Tool: "t", RunID: "x"}, nil, toolsession.Options{Key: "x"}) // same instant
	tier2.Register(toolsession.Origin{Tool: "t", RunID: "z"}, nil, toolsession.Options{Key: "z"})
	if err := tier2.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reps := rec2.all(); len(reps) != 1 || reps[0].RunID != "x" {
		t.Fatalf("tie: reports = %+v, want the older registration x evicted", reps)
	}
	tier.FireShutdown(context.Background())
	tier2.FireShutdown(context.Background())
}

func TestShutdownJoinsBackgroundCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Report: rec.report})
		tier.Register(toolsession.Origin{Tool: "t", RunID: "a"}, func(context.Context) error {
			time.Sleep(time.Second) // a slow Stop, in fake time
			return nil
		}, toolsession.Options{Key: "a"})
		tier.Register(toolsession.Origin{Tool: "t", RunID: "b"}, nil, toolsession.Options{Key: "b"}) // evicts a in the background
		synctest.Wait()
		if len(rec.all()) != 0 {
			t.Fatal("the eviction finished before its slow Stop")
		}
		if n := tier.FireShutdown(context.Background()); n != 1 {
			t.Fatalf("FireShutdown closed %d, want 1 (b)", n)
		}
		if got := len(rec.all()); got != 2 {
			t.Fatalf("after FireShutdown %d reports, want 2: it must join the eviction", got)
		}
	})
}

func TestSettledHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Timeout: time.Hour})
		release := make(chan struct{})
		tier.Register(toolsession.Origin{Tool: "t"}, func(context.Context) error { <-release; return nil }, toolsession.Options{Key: "a"})
		tier.Register(toolsession.Origin{Tool: "t"}, nil, toolsession.Options{Key: "b"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := tier.Settled(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Settled = %v, want the context's deadline", err)
		}
		close(release)
		if err := tier.Settled(context.Background()); err != nil {
			t.Fatal(err)
		}
		tier.FireShutdown(context.Background())
	})
}

func TestReportsNeverCarryTheRawKey(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{Report: rec.report, MaxLive: 1})
	k := key(t, toolsession.ScopeSession, toolsession.Facts{SessionID: "conv-secret", Tenant: "acme-corp", Principal: "alice@example.com"})
	o := toolsession.Origin{Tool: "run_code", SessionID: "conv-secret"}
	tier.Register(o, func(context.Context) error { return errors.New("stop failed") }, toolsession.Options{Key: k, Scope: toolsession.ScopeSession})
	tier.Register(o, func(context.Context) error { panic("boom") }, toolsession.Options{Key: k + "x", Scope: toolsession.ScopeSession}) // evicts the first
	tier.FireShutdown(context.Background())
	reps := rec.all()
	if len(reps) != 2 {
		t.Fatalf("%d reports, want 2", len(reps))
	}
	for _, r := range reps {
		text := fmt.Sprintf("%+v %v", r, r.Err)
		for _, secret := range []string{k, "acme-corp", "alice@example.com"} {
			if strings.Contains(text, secret) {
				t.Fatalf("report %q contains %q", text, secret)
			}
		}
		if r.KeyHash == "" {
			t.Fatal("report has no key hash")
		}
	}
}

func TestHeldAndTookUseTheInjectedClock(t *testing.T) {
	t.Parallel()
	clk := newClock()
	rec := &recorder{}
	tier := toolsession.NewTier(toolsession.Config{Now: clk.Now, Report: rec.report})
	tier.Register(toolsession.Origin{Tool: "t", ToolCallID: "c", RunID: "run-7", SessionID: "sess-7", Tenant: "acme", Principal: "bob"}, func(context.Context) error {
		clk.Advance(1500 * time.Millisecond)
		return nil
	}, toolsession.Options{Key: "k", Scope: toolsession.ScopeCall})
	clk.Advance(42 * time.Second)
	tier.FireCall(context.Background(), "c")
	reps := rec.all()
	if len(reps) != 1 {
		t.Fatalf("%d reports", len(reps))
	}
	r := reps[0]
	if r.Held != 42*time.Second || r.Took != 1500*time.Millisecond || r.RunID != "run-7" || r.SessionID != "sess-7" ||
		r.Tenant != "acme" || r.Principal != "bob" || r.Scope != toolsession.ScopeCall {
		t.Fatalf("report = %+v", r)
	}
}

func TestDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tier := toolsession.NewTier(toolsession.Config{Report: rec.report})
		for i := range 65 {
			tier.Register(toolsession.Origin{Tool: "t"}, nil, toolsession.Options{Key: fmt.Sprint(i)})
		}
		if tier.Live() != toolsession.DefaultMaxLive {
			t.Fatalf("Live = %d, want the default bound %d", tier.Live(), toolsession.DefaultMaxLive)
		}
		time.Sleep(toolsession.DefaultIdle)
		tier.SweepIdle()
		if err := tier.Settled(context.Background()); err != nil {
			t.Fatal(err)
		}
		if tier.Live() != 0 {
			t.Fatalf("Live = %d after the default idle bound", tier.Live())
		}
		release := make(chan struct{})
		tier.Register(toolsession.Origin{Tool: "t", RunID: "r"}, func(context.Context) error { <-release; return nil }, toolsession.Options{Key: "x"})
		start := time.Now()
		tier.FireRun(context.Background(), "r")
		if time.Since(start) != toolsession.DefaultTimeout {
			t.Fatalf("default timeout = %s", time.Since(start))
		}
		close(release)
	})
}
