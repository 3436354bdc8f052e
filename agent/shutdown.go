package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentry-dev/agentry/toolsession"
)

// CloseToolSessions says a hosted conversation has ended: its
// session-scoped tool sessions close (reason session-end), and so does
// every pause of it this agent holds — the paused runs' run-scoped
// sessions and the call-scoped sessions of calls that asked mid-call; their
// checkpoints are then refused (ErrCheckpointAbandoned). "" closes every
// session-scoped registration and abandons every pause bound to a session.
// It returns how many tool sessions it closed.
func (a *Agent) CloseToolSessions(ctx context.Context, sessionID string) int {
	return a.CloseToolSessionsReason(ctx, sessionID, toolsession.ReasonSessionEnd)
}

// CloseToolSessionsReason is CloseToolSessions with the reason to report,
// such as toolsession.ReasonEvicted for a host evicting an idle
// conversation. An empty reason is session-end.
func (a *Agent) CloseToolSessionsReason(ctx context.Context, sessionID string, r toolsession.Reason) int {
	if r == "" {
		r = toolsession.ReasonSessionEnd
	}
	var abandoned []pausedRun
	a.mu.Lock()
	for id, p := range a.paused {
		if p.sessionID != "" && (sessionID == "" || p.sessionID == sessionID) {
			abandoned = append(abandoned, p)
			delete(a.paused, id)
			a.spendLocked(id, ErrCheckpointAbandoned)
		}
	}
	a.mu.Unlock()
	t := a.tier.Load()
	if t == nil {
		return 0
	}
	n := t.FireSession(ctx, sessionID, r)
	for _, p := range abandoned {
		n += a.closePaused(ctx, p)
	}
	return n
}

// CancelRun cancels the run with id runID if it is in flight (a Run, or a
// Resume continuing it): its context is cancelled with cause, which the
// run's error then wraps, and the run ends as a cancelled run does. It
// reports whether such a run was in flight. A host that stops a turn
// this way needs no cancellable context of its own around the run.
func (a *Agent) CancelRun(runID string, cause error) bool {
	if runID == "" {
		return false
	}
	a.mu.Lock()
	var found *run
	for r := range a.runs {
		if r.id == runID {
			found = r
			break
		}
	}
	a.mu.Unlock()
	if found == nil {
		return false
	}
	found.cancel(cause)
	return true
}

// Shutdown stops the agent: new runs and resumes are refused
// (ErrShutdown); in-flight runs may finish until ctx ends, and are then
// cancelled (their error wraps ErrShutdown) and given TeardownTimeout to
// stop; sinks are flushed; every tool session closes (reason shutdown);
// sinks are closed. Each step after the drain is bounded by
// TeardownTimeout on its own, so a hung cleanup or sink cannot hold it.
//
// It is idempotent: concurrent and later calls share the first call's
// result (a caller whose ctx ends first returns ctx's error). It never
// installs signal handlers; the composition root wires signals to it.
func (a *Agent) Shutdown(ctx context.Context) error {
	first := false
	a.shutOnce.Do(func() { first = true })
	if first {
		a.shutErr = a.shutdown(ctx)
		close(a.shutDone)
		return a.shutErr
	}
	select {
	case <-a.shutDone:
		return a.shutErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Agent) shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.closing = true
	var drained chan struct{}
	if a.inflight > 0 {
		a.drained = make(chan struct{})
		drained = a.drained
	}
	a.mu.Unlock()

	var errs []error
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			a.mu.Lock()
			n := len(a.runs)
			for r := range a.runs {
				r.cancel(ErrShutdown)
			}
			a.mu.Unlock()
			errs = append(errs, fmt.Errorf("agent: shutdown: %d runs were still in flight at the deadline and were cancelled: %w", n, context.Cause(ctx)))
			t := time.NewTimer(a.teardown)
			select {
			case <-drained:
			case <-t.C:
				errs = append(errs, fmt.Errorf("agent: shutdown: cancelled runs did not stop within %s; whatever they open is closed when they end", a.teardown))
			}
			t.Stop()
		}
	}

	step := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), a.teardown)
	}
	sctx, cancel := step()
	if err := a.bus.Flush(sctx); err != nil {
		errs = append(errs, fmt.Errorf("agent: shutdown: flushing sinks: %w", err))
	}
	cancel()

	// From here a run that ends late fires again on its way out (finish).
	a.mu.Lock()
	a.fired = true
	a.mu.Unlock()
	if t := a.tier.Load(); t != nil {
		sctx, cancel = step()
		t.FireShutdown(sctx)
		cancel()
	}

	sctx, cancel = step()
	if err := a.bus.Close(sctx); err != nil {
		errs = append(errs, fmt.Errorf("agent: shutdown: closing sinks: %w", err))
	}
	cancel()
	return errors.Join(errs...)
}
