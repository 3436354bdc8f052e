package toolsession

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrCapacity is matched (errors.Is) by every [*CapacityError]: a new
// session was refused because every live one had a call in flight for as
// long as the tier waits. A host answers it with 429 and Retry-After.
var ErrCapacity = errors.New("toolsession: every live tool session is busy")

// CapacityError refuses room for a new session: all MaxLive registrations
// were pinned by calls in flight, and none was released within Waited.
// Nothing was started and nothing was evicted.
type CapacityError struct {
	Tool    string
	MaxLive int
	Waited  time.Duration
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("toolsession: no room for a new %s session: all %d live sessions (the MaxLive bound) have a call in flight "+
		"and none finished within %s; retry later, or raise the bound", e.Tool, e.MaxLive, e.Waited)
}

// Is matches ErrCapacity.
func (e *CapacityError) Is(target error) bool { return target == ErrCapacity }

// Lease pins one registration for the length of a call: while any lease
// holds it, the registration is neither evicted past MaxLive nor swept
// idle. (Explicit firings — call, run and session ends, shutdown — still
// close it: they are what the registration was scoped to.) A Lease taken
// before the session exists holds a reservation instead, so the room is
// there before the tool starts anything; the first Register under the
// lease's key turns the reservation into the registration.
//
// Release it exactly when the call is over. A nil *Lease is valid and
// holds nothing (a door that cannot pin).
type Lease struct {
	t    *Tier
	r    *registration
	once sync.Once

	// Fresh is true when no registration was held under the key: this
	// lease reserved room for a new session. A tool that still holds a
	// handle under the key must not use it — its registration was claimed
	// and its cleanup is on the way.
	Fresh bool
	// Queued is true when Hold had to wait for room; Waited is for how
	// long, on the tier's clock.
	Queued bool
	Waited time.Duration
	// KeyHash is HashKey of the key.
	KeyHash string
	// MaxLive is the tier's bound, for whoever reports the wait.
	MaxLive int
}

// Gen identifies the registration the lease pins: leases that pin the same
// registration have the same Gen, and a registration made after an earlier
// one under the key was claimed has a new one. A tool binds its live
// handle to the Gen so that it never hands out a handle whose registration
// is already being closed. 0 for a nil lease.
func (l *Lease) Gen() uint64 {
	if l == nil {
		return 0
	}
	return l.r.id
}

// Release drops the lease's pin: the registration is touched (its idle
// time starts now), may be evicted again, and a reservation no Register
// took is dropped. A Hold waiting for room is woken. Release is
// idempotent.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() { l.t.release(l.r) })
}

// Hold pins the registration under (o.Tool, opt.Scope, opt.Key) for a call
// in flight, or reserves room for it when there is none. Reserving room
// past MaxLive evicts the coldest unpinned registration (in the
// background, reason evicted); when every live registration is pinned,
// Hold waits for one to be released or closed, up to Config.Wait, and
// then returns a [*CapacityError] (errors.Is ErrCapacity). It returns
// ctx's cause when ctx ends first. opt.Key is required.
func (t *Tier) Hold(ctx context.Context, o Origin, opt Options) (*Lease, error) {
	if opt.Scope == "" {
		opt.Scope = ScopeRun
	}
	if opt.Key == "" {
		return nil, fmt.Errorf("toolsession: tool %s: Hold needs Options.Key (derive it with toolsession.Key)", o.Tool)
	}
	dk := dedupKey{o.Tool, opt.Scope, opt.Key}
	began := t.now()
	var timer *time.Timer
	queued := false
	for {
		now := t.now()
		t.mu.Lock()
		expired := t.sweepLocked(now)
		if r, ok := t.byKey[dk]; ok {
			r.pins++
			l := &Lease{t: t, r: r, KeyHash: r.keyHash, MaxLive: t.maxLive}
			t.mu.Unlock()
			t.background(expired, ReasonIdle)
			return l.waited(queued, began), nil
		}
		evicted := t.trimLocked(nil, 1)
		if t.live+t.reserved < t.maxLive {
			t.seq++
			r := &registration{id: t.seq, pending: true, pins: 1, keyHash: HashKey(opt.Key), origin: o, opt: opt}
			t.byKey[dk] = r
			t.reserved++
			l := &Lease{t: t, r: r, Fresh: true, KeyHash: r.keyHash, MaxLive: t.maxLive}
			t.mu.Unlock()
			t.background(expired, ReasonIdle)
			t.background(evicted, ReasonEvicted)
			return l.waited(queued, began), nil
		}
		if t.room == nil {
			t.room = make(chan struct{})
		}
		room := t.room
		t.mu.Unlock()
		t.background(expired, ReasonIdle)
		t.background(evicted, ReasonEvicted)

		if t.wait < 0 {
			return nil, &CapacityError{Tool: o.Tool, MaxLive: t.maxLive}
		}
		if timer == nil {
			timer = time.NewTimer(t.wait)
			defer timer.Stop()
		}
		queued = true
		select {
		case <-room:
		case <-timer.C:
			return nil, &CapacityError{Tool: o.Tool, MaxLive: t.maxLive, Waited: t.wait}
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (l *Lease) waited(queued bool, began time.Time) *Lease {
	if queued {
		l.Queued = true
		l.Waited = l.t.now().Sub(began)
	}
	return l
}

func (t *Tier) release(r *registration) {
	now := t.now()
	t.mu.Lock()
	r.pins--
	var evicted []*registration
	switch {
	case r.pins > 0, r.claimed:
	case r.pending:
		// Nobody registered under the reservation (the start failed):
		// give the room back.
		dk := dedupKey{r.origin.Tool, r.opt.Scope, r.opt.Key}
		if t.byKey[dk] == r {
			delete(t.byKey, dk)
		}
		r.pending, r.claimed = false, true
		t.reserved--
		t.roomLocked()
	default:
		r.touched = now
		t.moveToBackLocked(r)
		// Plain Registers may have taken the tier past its bound while
		// everything was pinned; now this one can go if it is the coldest.
		evicted = t.trimLocked(nil, 0)
		t.roomLocked()
	}
	t.mu.Unlock()
	t.background(evicted, ReasonEvicted)
}
