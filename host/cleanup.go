package host

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// cleanups holds the provider sessions whose close failed, and retries
// each through its *provider.CleanupError (RetryCleanup) on a doubling
// back-off until it succeeds, and once more at shutdown. Nothing is
// dropped: every failure and every retry is in the conversation's turn
// log and on the bus (agentry.host.cleanup_failed, cleanup_done).
type cleanups struct {
	h *Host

	mu      sync.Mutex
	items   []*cleanup
	stopped bool
	wake    chan struct{} // one token: the list changed
	running bool          // the retry goroutine is alive
	done    chan struct{} // closed when it returns
	stop    chan struct{}
}

type cleanup struct {
	conv     string
	owner    tool.Identity
	provider string // the key of the provider that failed to close
	kind     string // what was closing: "close", "evict", "shutdown"
	retry    func(context.Context) error
	attempts int
	wait     time.Duration
	next     time.Time
}

func newCleanups(h *Host) *cleanups {
	return &cleanups{h: h, wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// retryOf finds how to retry a failed close: the cleanup error's own
// RetryCleanup. An error without one cannot be retried; it is recorded.
func retryOf(err error) func(context.Context) error {
	var ce *provider.CleanupError
	if errors.As(err, &ce) {
		return ce.RetryCleanup
	}
	return nil
}

// add records a failed close and schedules its retry.
func (c *cleanups) add(ctx context.Context, lc *liveConv, kind string, err error) {
	h := c.h
	retry := retryOf(err)
	prov := cmp.Or(lc.conv.Provider, h.key)
	h.recordCleanup(ctx, lc.id, lc.owner, prov, kind, 1, err, retry != nil)
	if retry == nil {
		return
	}
	it := &cleanup{conv: lc.id, owner: lc.owner, provider: prov, kind: kind, retry: retry, attempts: 1, wait: h.opt.CleanupRetry}
	it.next = time.Now().Add(it.wait)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items = append(c.items, it)
	if c.stopped {
		return // shutdown's final pass takes it
	}
	if !c.running {
		c.running = true
		c.done = make(chan struct{})
		go c.loop()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// pending counts the cleanups not yet done (for /metrics).
func (c *cleanups) pending() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(len(c.items))
}

// loop retries what is due, sleeping until the next is; it returns when
// the list is empty or shutdown stops it.
func (c *cleanups) loop() {
	defer close(c.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		c.mu.Lock()
		if len(c.items) == 0 || c.stopped {
			c.running = false
			c.mu.Unlock()
			return
		}
		now := time.Now()
		var due []*cleanup
		next := time.Time{}
		for _, it := range c.items {
			if !it.next.After(now) {
				due = append(due, it)
			} else if next.IsZero() || it.next.Before(next) {
				next = it.next
			}
		}
		c.mu.Unlock()
		for _, it := range due {
			c.attempt(it)
		}
		if len(due) > 0 {
			continue
		}
		t.Reset(time.Until(next))
		select {
		case <-t.C:
		case <-c.wake:
			if !t.Stop() {
				<-t.C
			}
		case <-c.stop:
			return
		}
	}
}

// attempt retries one cleanup, bounded by the close timeout.
func (c *cleanups) attempt(it *cleanup) bool {
	h := c.h
	ctx, cancel := context.WithTimeout(context.Background(), h.opt.CloseTimeout)
	err := it.retry(ctx)
	cancel()
	c.mu.Lock()
	it.attempts++
	if err == nil {
		for i, x := range c.items {
			if x == it {
				c.items = append(c.items[:i], c.items[i+1:]...)
				break
			}
		}
	} else {
		it.wait = min(it.wait*2, h.opt.CleanupRetryMax)
		it.next = time.Now().Add(it.wait)
	}
	attempts := it.attempts
	c.mu.Unlock()
	h.recordCleanup(context.Background(), it.conv, it.owner, it.provider, it.kind, attempts, err, true)
	return err == nil
}

// final stops the retry loop and tries every cleanup left once more; it
// returns how many still fail.
func (c *cleanups) final(ctx context.Context) int {
	c.mu.Lock()
	c.stopped = true
	done := c.done
	running := c.running
	c.mu.Unlock()
	if running {
		close(c.stop)
		<-done
	}
	c.mu.Lock()
	left := append([]*cleanup(nil), c.items...)
	c.mu.Unlock()
	n := 0
	for _, it := range left {
		if !c.attempt(it) {
			n++
		}
	}
	return n
}

// recordCleanup writes one cleanup attempt to the turn log and the bus.
// err nil is a success.
func (h *Host) recordCleanup(ctx context.Context, id string, o tool.Identity, prov, kind string, attempt int, err error, retrying bool) {
	now := h.now().UTC()
	turn := &Turn{Kind: "cleanup", Outcome: TurnCleanedUp, Started: now, Ended: now}
	if err != nil {
		turn.Outcome, turn.Error = TurnCleanupFailed, clipMessage(err.Error())
		h.metrics.failures.WithLabelValues("cleanup").Inc()
	}
	// Recorded first, then told: whoever hears the event finds the entry.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if serr := h.appendTurn(sctx, id, o, turn); serr != nil {
		h.log.Error("host: recording a provider cleanup in the turn log", "session", id, "err", serr)
	}
	if err != nil {
		h.emit(TypeCleanupFailed, &CleanupEvent{Provider: prov, Closing: kind, Attempt: attempt,
			Error: clipMessage(err.Error()), Retrying: retrying}, id, o)
	} else {
		h.emit(TypeCleanupDone, &CleanupEvent{Provider: prov, Closing: kind, Attempt: attempt}, id, o)
	}
}

// appendTurn adds a turn-log entry without changing the conversation
// (its version stays, so a live copy of it is not made stale).
func (h *Host) appendTurn(ctx context.Context, id string, o tool.Identity, t *Turn) error {
	return h.store.AppendTurn(ctx, o, id, *t)
}
