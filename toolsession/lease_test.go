package toolsession_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/toolsession"
)

// holdAndRegister is what a tool does to open a session for a call in
// flight: reserve room, then register the cleanup under the same key.
func holdAndRegister(t *testing.T, tier *toolsession.Tier, run string, cleanup func(context.Context) error) (*toolsession.Lease, string) {
	t.Helper()
	k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: run})
	o := toolsession.Origin{Tool: "run_code", RunID: run}
	l, err := tier.Hold(context.Background(), o, toolsession.Options{Key: k})
	if err != nil {
		t.Fatalf("Hold(%s): %v", run, err)
	}
	if out := tier.Register(o, cleanup, toolsession.Options{Key: k}); out.Reused != !l.Fresh {
		t.Fatalf("Register(%s) after Hold: reused %v, lease fresh %v", run, out.Reused, l.Fresh)
	}
	return l, k
}

func TestPinnedRegistrationIsNeverEvicted(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	clk := newClock()
	tier := toolsession.NewTier(toolsession.Config{MaxLive: 2, Report: rec.report, Now: clk.Now})
	var a, b, c atomic.Int32
	la, _ := holdAndRegister(t, tier, "run-a", counting(&a)) // the coldest, but busy
	clk.Advance(time.Second)
	lb, _ := holdAndRegister(t, tier, "run-b", counting(&b))
	lb.Release()
	clk.Advance(time.Second)
	lc, _ := holdAndRegister(t, tier, "run-c", counting(&c))
	if err := tier.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.Load() != 0 || b.Load() != 1 || c.Load() != 0 {
		t.Fatalf("closes a=%d b=%d c=%d; want only the idle b evicted, never the pinned a", a.Load(), b.Load(), c.Load())
	}
	reps := rec.all()
	if len(reps) != 1 || reps[0].RunID != "run-b" || reps[0].Reason != toolsession.ReasonEvicted {
		t.Fatalf("reports %+v; want one eviction of run-b", reps)
	}
	la.Release()
	lc.Release()
	tier.FireShutdown(context.Background())
}

func TestHoldWaitsThenRefusesNamingTheBound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var a atomic.Int32
		tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Wait: 3 * time.Second})
		la, _ := holdAndRegister(t, tier, "run-a", counting(&a))
		defer la.Release()

		k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-b"})
		start := time.Now()
		l, err := tier.Hold(context.Background(), toolsession.Origin{Tool: "run_code", RunID: "run-b"}, toolsession.Options{Key: k})
		if l != nil || err == nil {
			t.Fatalf("Hold with every session busy = %v, %v; want a capacity error", l, err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Fatalf("refused after %s; want after the 3s Wait bound", waited)
		}
		var ce *toolsession.CapacityError
		if !errors.Is(err, toolsession.ErrCapacity) || !errors.As(err, &ce) || ce.MaxLive != 1 || ce.Waited != 3*time.Second {
			t.Fatalf("err = %#v; want a *CapacityError matching ErrCapacity with MaxLive 1, Waited 3s", err)
		}
		for _, want := range []string{"all 1 live sessions", "MaxLive", "3s", "retry later"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), k) {
			t.Fatalf("error %q leaks the key", err)
		}
		if a.Load() != 0 || tier.Live() != 1 {
			t.Fatalf("the busy session was closed (%d) or the tier changed (live %d)", a.Load(), tier.Live())
		}
	})
}

func TestHoldIsAdmittedWhenAPinIsReleased(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		var a atomic.Int32
		tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Report: rec.report})
		la, _ := holdAndRegister(t, tier, "run-a", counting(&a))

		k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-b"})
		got := make(chan *toolsession.Lease, 1)
		go func() {
			l, err := tier.Hold(context.Background(), toolsession.Origin{Tool: "run_code", RunID: "run-b"}, toolsession.Options{Key: k})
			if err != nil {
				t.Errorf("Hold: %v", err)
			}
			got <- l
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("Hold returned while the only session was busy")
		default:
		}
		time.Sleep(2 * time.Second) // the call in flight takes a while (fake time)
		la.Release()
		lb := <-got
		if !lb.Fresh || !lb.Queued || lb.Waited != 2*time.Second {
			t.Fatalf("lease %+v; want fresh, queued, waited 2s", lb)
		}
		if err := tier.Settled(context.Background()); err != nil {
			t.Fatal(err)
		}
		if a.Load() != 1 || len(rec.all()) != 1 || rec.all()[0].Reason != toolsession.ReasonEvicted {
			t.Fatalf("a closed %d times, reports %+v; want a evicted once it was idle", a.Load(), rec.all())
		}
		lb.Release()
		if tier.Live() != 0 {
			t.Fatalf("live %d after an unregistered reservation was released; want 0", tier.Live())
		}
	})
}

func TestHoldEndsWithTheContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tier := toolsession.NewTier(toolsession.Config{MaxLive: 1})
		la, _ := holdAndRegister(t, tier, "run-a", nil)
		defer la.Release()
		cause := errors.New("the caller went away")
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(time.Second, func() { cancel(cause) })
		k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-b"})
		if _, err := tier.Hold(ctx, toolsession.Origin{Tool: "run_code"}, toolsession.Options{Key: k}); !errors.Is(err, cause) {
			t.Fatalf("Hold = %v; want the context's cause", err)
		}
	})
}

func TestNegativeWaitRefusesAtOnce(t *testing.T) {
	t.Parallel()
	tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Wait: -1})
	la, _ := holdAndRegister(t, tier, "run-a", nil)
	k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-b"})
	o := toolsession.Origin{Tool: "run_code"}
	if _, err := tier.Hold(context.Background(), o, toolsession.Options{Key: k}); !errors.Is(err, toolsession.ErrCapacity) {
		t.Fatalf("Hold = %v; want ErrCapacity at once", err)
	}
	la.Release()
	lb, err := tier.Hold(context.Background(), o, toolsession.Options{Key: k})
	if err != nil {
		t.Fatalf("Hold after the release: %v", err)
	}
	lb.Release()
	tier.FireShutdown(context.Background())
}

func TestIdleSweepSparesAPinnedRegistration(t *testing.T) {
	t.Parallel()
	clk := newClock()
	var a atomic.Int32
	tier := toolsession.NewTier(toolsession.Config{Idle: time.Minute, Now: clk.Now})
	la, _ := holdAndRegister(t, tier, "run-a", counting(&a))
	clk.Advance(10 * time.Minute) // a long execute
	tier.SweepIdle()
	_ = tier.Settled(context.Background())
	if a.Load() != 0 {
		t.Fatal("the idle sweep closed a session with a call in flight")
	}
	la.Release() // the call ends: idle time starts now
	clk.Advance(59 * time.Second)
	tier.SweepIdle()
	_ = tier.Settled(context.Background())
	if a.Load() != 0 {
		t.Fatal("the sweep measured idleness from before the call ended")
	}
	clk.Advance(time.Second)
	tier.SweepIdle()
	_ = tier.Settled(context.Background())
	if a.Load() != 1 {
		t.Fatal("the released session was not swept once idle")
	}
}

func TestLeasesOfOneKeyShareOneReservation(t *testing.T) {
	t.Parallel()
	tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Wait: -1})
	k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-a"})
	o := toolsession.Origin{Tool: "run_code", RunID: "run-a"}
	l1, err := tier.Hold(context.Background(), o, toolsession.Options{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := tier.Hold(context.Background(), o, toolsession.Options{Key: k})
	if err != nil {
		t.Fatalf("a second call under the same key waited for room: %v", err)
	}
	if !l1.Fresh || l2.Fresh || l1.Gen() != l2.Gen() || l1.Gen() == 0 {
		t.Fatalf("leases %+v (gen %d) and %+v (gen %d); want one reservation, the first fresh", l1, l1.Gen(), l2, l2.Gen())
	}
	if tier.Live() != 0 {
		t.Fatalf("a reservation counts as live (%d) before anything registered", tier.Live())
	}
	if out := tier.Register(o, nil, toolsession.Options{Key: k}); out.Reused || out.Calls != 1 || out.KeyHash != l1.KeyHash {
		t.Fatalf("Register into the reservation = %+v; want a first registration", out)
	}
	if out := tier.Register(o, nil, toolsession.Options{Key: k}); !out.Reused || out.Calls != 2 {
		t.Fatalf("second Register = %+v; want reused, 2 calls", out)
	}
	l1.Release()
	l1.Release() // idempotent: must not drop l2's pin
	other := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-b"})
	if _, err := tier.Hold(context.Background(), toolsession.Origin{Tool: "run_code"}, toolsession.Options{Key: other}); !errors.Is(err, toolsession.ErrCapacity) {
		t.Fatalf("Hold while l2 still pins the only session = %v; want ErrCapacity", err)
	}
	l2.Release()
	tier.FireShutdown(context.Background())
}

func TestAFiringStillClosesAPinnedRegistration(t *testing.T) {
	t.Parallel()
	var a atomic.Int32
	tier := toolsession.NewTier(toolsession.Config{})
	la, k := holdAndRegister(t, tier, "run-a", counting(&a))
	if n := tier.FireRun(context.Background(), "run-a"); n != 1 || a.Load() != 1 {
		t.Fatalf("FireRun closed %d (cleanups %d); a run end closes its sessions, pinned or not", n, a.Load())
	}
	la.Release() // after the claim: harmless
	o := toolsession.Origin{Tool: "run_code", RunID: "run-a"}
	lb, err := tier.Hold(context.Background(), o, toolsession.Options{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if !lb.Fresh || lb.Gen() == la.Gen() {
		t.Fatalf("a lease after the claim is fresh=%v gen %d (was %d); want a new registration", lb.Fresh, lb.Gen(), la.Gen())
	}
	lb.Release()
}

func TestPlainRegisterPastABusyBoundIsTrimmedOnRelease(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	clk := newClock()
	tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Report: rec.report, Now: clk.Now})
	la, _ := holdAndRegister(t, tier, "run-a", nil)
	clk.Advance(time.Second)
	// A tool that does not hold leases registers anyway: it is never the
	// victim of its own registration, and the busy one is spared.
	k := key(t, toolsession.ScopeRun, toolsession.Facts{RunID: "run-b"})
	tier.Register(toolsession.Origin{Tool: "run_code", RunID: "run-b"}, nil, toolsession.Options{Key: k})
	_ = tier.Settled(context.Background())
	if tier.Live() != 2 || len(rec.all()) != 0 {
		t.Fatalf("live %d, reports %+v; want both kept while one is busy", tier.Live(), rec.all())
	}
	clk.Advance(time.Second)
	la.Release() // a is now the warmest; b is the coldest idle one
	_ = tier.Settled(context.Background())
	reps := rec.all()
	if tier.Live() != 1 || len(reps) != 1 || reps[0].RunID != "run-b" || reps[0].Reason != toolsession.ReasonEvicted {
		t.Fatalf("live %d, reports %+v; want the tier trimmed back to its bound, evicting b", tier.Live(), reps)
	}
	tier.FireShutdown(context.Background())
}

func TestHoldNeedsAKeyAndANilLeaseHoldsNothing(t *testing.T) {
	t.Parallel()
	tier := toolsession.NewTier(toolsession.Config{})
	if _, err := tier.Hold(context.Background(), toolsession.Origin{Tool: "run_code"}, toolsession.Options{}); err == nil || !strings.Contains(err.Error(), "Options.Key") {
		t.Fatalf("Hold without a key = %v; want a refusal naming Options.Key", err)
	}
	var l *toolsession.Lease
	l.Release()
	if l.Gen() != 0 {
		t.Fatal("a nil lease has a generation")
	}
}
