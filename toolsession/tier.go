package toolsession

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Defaults for a zero [Config].
const (
	DefaultTimeout = 5 * time.Second
	DefaultIdle    = 15 * time.Minute
	DefaultMaxLive = 64
	DefaultWait    = 10 * time.Second
)

// Origin is the call a registration came from. RunID and SessionID are
// empty when the door has none; Tenant and Principal are empty unless the
// caller gave an identity. They are carried into the Report so a close can
// be attributed to whoever opened the session.
type Origin struct {
	Tool, ToolCallID, RunID, SessionID string
	Tenant, Principal                  string
}

// Options describe one registration.
type Options struct {
	// Scope is how long the cleanup may live; zero means ScopeRun.
	Scope Scope
	// Key deduplicates registrations within (tool, scope). Derive it with
	// [Key]. An empty key is never deduplicated: each such registration
	// stands alone.
	Key string
	// RunnerID names the backend holding the resource (a code runner's ID).
	RunnerID string
	// Label is one free-form fact about what was opened, such as the
	// language. It is reported as is: never put user data in it.
	Label string
}

// Outcome says what a Register did.
type Outcome struct {
	// Reused is true when the call joined a session already held.
	Reused bool
	// KeyHash is HashKey(opt.Key), or "" when the key was empty.
	KeyHash string
	// Calls counts the registrations that have shared this session.
	Calls int
}

// Report describes one close, successful or not.
type Report struct {
	Failed   bool
	Tool     string
	Scope    Scope
	KeyHash  string
	RunnerID string
	Label    string
	Reason   Reason
	// RunID and SessionID are the registration's origin, so a close that
	// happens long after its run can still be joined to it.
	RunID, SessionID string
	// Tenant and Principal are the origin's identity, empty when none was
	// given.
	Tenant, Principal string
	// Held runs from registration until the tier began closing; Took is the
	// cleanup's own duration (up to the timeout when it was abandoned).
	Held, Took time.Duration
	// Err is nil unless Failed. It is a *TimeoutError when the cleanup
	// outran Config.Timeout and a *PanicError when it panicked.
	Err error
}

// TimeoutError reports a cleanup that did not return within its deadline.
type TimeoutError struct {
	Tool    string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("toolsession: cleanup for tool %q did not finish within %s; it was abandoned", e.Tool, e.Timeout)
}

// Unwrap lets callers match a timeout with errors.Is(err, context.DeadlineExceeded).
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// PanicError reports tool code that panicked and was recovered: a
// cleanup (recovered by the tier; Cleanup is true) or a tool call
// (recovered by the door's tool.Invoke, with the call's id and the stack).
// It is the one panic error of every tool door.
type PanicError struct {
	Tool string
	// ToolCallID is the call that panicked (empty for a cleanup).
	ToolCallID string
	// Cleanup is true when a teardown cleanup panicked, not a call.
	Cleanup bool
	Value   any
	// Stack is where it panicked, when the recoverer kept it.
	Stack []byte
}

func (e *PanicError) Error() string {
	if e.Cleanup {
		return fmt.Sprintf("toolsession: cleanup for tool %q panicked: %v", e.Tool, e.Value)
	}
	return fmt.Sprintf("tool %s panicked in call %s (recovered; the caller got an error result): %v", e.Tool, e.ToolCallID, e.Value)
}

// Config tunes a Tier. Zero values take the defaults.
type Config struct {
	// Timeout bounds each cleanup (default 5s).
	Timeout time.Duration
	// Idle is how long an untouched registration lives before the lazy
	// sweep closes it (default 15m). A negative value turns the sweep off.
	Idle time.Duration
	// MaxLive bounds live registrations; past it the coldest idle one is
	// evicted (default 64). A registration pinned by a [Lease] (a call in
	// flight) is never evicted or swept idle; see [Tier.Hold].
	MaxLive int
	// Wait bounds how long [Tier.Hold] waits for room when every live
	// registration is pinned (default 10s); then it returns a
	// [*CapacityError]. A negative value refuses at once.
	Wait time.Duration
	// Report receives every close. It may be called from several
	// goroutines at once and must not block for long. A panic in it is
	// recovered.
	Report func(Report)
	// Now is the clock (default time.Now). Timeouts use real timers; Now
	// drives idle expiry and the Held/Took durations.
	Now func() time.Time
}

type groupKey struct {
	scope Scope
	id    string // tool call, run or session id of the origin
}

type dedupKey struct {
	tool  string
	scope Scope
	key   string
}

type registration struct {
	id         uint64
	origin     Origin
	opt        Options
	keyHash    string
	cleanup    func(context.Context) error
	registered time.Time
	touched    time.Time
	calls      int
	// pins counts the leases holding this registration (calls in flight).
	// A pinned registration is neither evicted nor swept idle.
	pins int
	// pending is a reservation a lease took before the session existed:
	// it holds room under MaxLive and joins the first Register under its
	// key. It is in byKey only, not in the touch list or a group.
	pending bool
	// claimed is set when a firing took it; a lease released later only
	// drops its pin.
	claimed bool
	// touch order: a doubly linked list, coldest at the front.
	prev, next *registration
}

// Tier holds registrations and fires them. It is safe for concurrent use.
// A Tier installs no timers and starts no goroutines until it fires.
type Tier struct {
	timeout time.Duration
	idle    time.Duration
	maxLive int
	wait    time.Duration
	report  func(Report)
	now     func() time.Time

	mu     sync.Mutex
	seq    uint64
	byKey  map[dedupKey]*registration
	groups map[groupKey]map[uint64]*registration
	head   *registration // coldest
	tail   *registration // warmest
	live   int
	// reserved counts pending reservations; live+reserved is what
	// MaxLive bounds.
	reserved int
	// room is closed (and cleared) whenever room may have appeared: a
	// claim, a released pin, a dropped reservation. Hold waits on it.
	room chan struct{}

	bgMu   sync.Mutex
	bg     int
	bgDone chan struct{} // closed when bg drops to zero
}

// NewTier returns a tier configured by c.
func NewTier(c Config) *Tier {
	t := &Tier{
		timeout: c.Timeout,
		idle:    c.Idle,
		maxLive: c.MaxLive,
		wait:    c.Wait,
		report:  c.Report,
		now:     c.Now,
		byKey:   make(map[dedupKey]*registration),
		groups:  make(map[groupKey]map[uint64]*registration),
	}
	if t.timeout <= 0 {
		t.timeout = DefaultTimeout
	}
	if t.idle == 0 {
		t.idle = DefaultIdle
	}
	if t.maxLive <= 0 {
		t.maxLive = DefaultMaxLive
	}
	if t.wait == 0 {
		t.wait = DefaultWait
	}
	if t.report == nil {
		t.report = func(Report) {}
	}
	if t.now == nil {
		t.now = time.Now
	}
	return t
}

// Live returns the number of registrations not yet claimed by a firing.
func (t *Tier) Live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// Register records cleanup for a session, or touches the registration
// already held under the same (tool, scope, key) and keeps its cleanup.
// A reservation a [Lease] took under that triple becomes the registration
// (and stays pinned by the lease). Before looking up, it sweeps idle
// registrations; after inserting, it evicts the coldest idle registrations
// past MaxLive — never a pinned one, and never the one it just made, so
// the tier may sit above the bound until pins are released. Those closes
// run in the background; [Tier.Settled] joins them. Register never blocks
// on a cleanup and never fails.
func (t *Tier) Register(o Origin, cleanup func(context.Context) error, opt Options) Outcome {
	if opt.Scope == "" {
		opt.Scope = ScopeRun
	}
	now := t.now()

	t.mu.Lock()
	expired := t.sweepLocked(now)
	if opt.Key != "" {
		if r, ok := t.byKey[dedupKey{o.Tool, opt.Scope, opt.Key}]; ok {
			if r.pending {
				t.activateLocked(r, o, cleanup, opt, now)
				out := Outcome{KeyHash: r.keyHash, Calls: 1}
				t.mu.Unlock()
				t.background(expired, ReasonIdle)
				return out
			}
			r.calls++
			r.touched = now
			t.moveToBackLocked(r)
			out := Outcome{Reused: true, KeyHash: r.keyHash, Calls: r.calls}
			t.mu.Unlock()
			t.background(expired, ReasonIdle)
			return out
		}
	}
	t.seq++
	r := &registration{id: t.seq}
	if opt.Key != "" {
		r.keyHash = HashKey(opt.Key)
		t.byKey[dedupKey{o.Tool, opt.Scope, opt.Key}] = r
	}
	t.activateLocked(r, o, cleanup, opt, now)
	evicted := t.trimLocked(r, 0)
	out := Outcome{KeyHash: r.keyHash, Calls: 1}
	t.mu.Unlock()

	t.background(expired, ReasonIdle)
	t.background(evicted, ReasonEvicted)
	return out
}

// activateLocked makes r a live registration: in its group and at the
// warm end of the touch list. r is new or a pending reservation.
func (t *Tier) activateLocked(r *registration, o Origin, cleanup func(context.Context) error, opt Options, now time.Time) {
	if r.pending {
		r.pending = false
		t.reserved--
	}
	r.origin, r.opt, r.cleanup = o, opt, cleanup
	r.registered, r.touched, r.calls = now, now, 1
	gk := groupOf(r)
	g := t.groups[gk]
	if g == nil {
		g = make(map[uint64]*registration)
		t.groups[gk] = g
	}
	g[r.id] = r
	t.pushBackLocked(r)
	t.live++
}

// trimLocked claims the coldest unpinned registrations (sparing keep)
// until live+reserved+room fits under MaxLive, or nothing more can go.
func (t *Tier) trimLocked(keep *registration, room int) []*registration {
	var evicted []*registration
	for t.live+t.reserved+room > t.maxLive {
		c := t.coldestLocked(keep)
		if c == nil {
			break
		}
		evicted = append(evicted, t.claimLocked(c))
	}
	return evicted
}

// FireCall closes the call-scoped registrations of one tool call.
func (t *Tier) FireCall(ctx context.Context, toolCallID string) int {
	return t.fire(ctx, t.claimGroup(ScopeCall, toolCallID), ReasonCallEnd)
}

// FireRun closes the run-scoped registrations of one run; "" closes every
// run-scoped registration.
func (t *Tier) FireRun(ctx context.Context, runID string) int {
	if runID == "" {
		return t.fire(ctx, t.claimScope(ScopeRun), ReasonRunEnd)
	}
	return t.fire(ctx, t.claimGroup(ScopeRun, runID), ReasonRunEnd)
}

// FireSession closes the session-scoped registrations of one hosted
// session; "" closes every session-scoped registration. r is the reason to
// report (default ReasonSessionEnd; a host evicting a conversation passes
// ReasonEvicted).
func (t *Tier) FireSession(ctx context.Context, sessionID string, r Reason) int {
	if r == "" {
		r = ReasonSessionEnd
	}
	if sessionID == "" {
		return t.fire(ctx, t.claimScope(ScopeSession), r)
	}
	return t.fire(ctx, t.claimGroup(ScopeSession, sessionID), r)
}

// FireShutdown closes everything, whatever its scope, then joins the
// background closes still running. Both are bounded by the per-cleanup
// timeout and by ctx.
func (t *Tier) FireShutdown(ctx context.Context) int {
	t.mu.Lock()
	var claimed []*registration
	for r := t.head; r != nil; {
		next := r.next
		claimed = append(claimed, t.claimLocked(r))
		r = next
	}
	t.mu.Unlock()
	n := t.fire(ctx, claimed, ReasonShutdown)
	_ = t.Settled(ctx)
	return n
}

// SweepIdle closes, in the background, every registration untouched for
// Config.Idle. Register calls it too; the tier never runs it on a timer.
func (t *Tier) SweepIdle() {
	now := t.now()
	t.mu.Lock()
	expired := t.sweepLocked(now)
	t.mu.Unlock()
	t.background(expired, ReasonIdle)
}

// Settled waits until every background close (idle, evicted) has settled,
// or until ctx ends.
func (t *Tier) Settled(ctx context.Context) error {
	t.bgMu.Lock()
	if t.bg == 0 {
		t.bgMu.Unlock()
		return nil
	}
	done := t.bgDone
	t.bgMu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func groupOf(r *registration) groupKey {
	switch r.opt.Scope {
	case ScopeCall:
		return groupKey{ScopeCall, r.origin.ToolCallID}
	case ScopeRun:
		return groupKey{ScopeRun, r.origin.RunID}
	case ScopeSession:
		return groupKey{ScopeSession, r.origin.SessionID}
	}
	return groupKey{scope: r.opt.Scope}
}

func (t *Tier) claimGroup(s Scope, id string) []*registration {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.groups[groupKey{s, id}]
	claimed := make([]*registration, 0, len(g))
	for _, r := range g {
		claimed = append(claimed, r)
	}
	for _, r := range claimed {
		t.claimLocked(r)
	}
	return claimed
}

func (t *Tier) claimScope(s Scope) []*registration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var claimed []*registration
	for r := t.head; r != nil; {
		next := r.next
		if r.opt.Scope == s {
			claimed = append(claimed, t.claimLocked(r))
		}
		r = next
	}
	return claimed
}

// sweepLocked claims the unpinned registrations idle for longer than
// t.idle. The touch list is ordered by touch time, so it stops at the
// first one that is not expired.
func (t *Tier) sweepLocked(now time.Time) []*registration {
	if t.idle < 0 {
		return nil
	}
	var expired []*registration
	for r := t.head; r != nil && now.Sub(r.touched) >= t.idle; {
		next := r.next
		if r.pins == 0 {
			expired = append(expired, t.claimLocked(r))
		}
		r = next
	}
	return expired
}

// coldestLocked is the unpinned registration (other than keep) with the
// oldest touch, ties broken by the oldest registration; nil when every
// one is pinned.
func (t *Tier) coldestLocked(keep *registration) *registration {
	var c *registration
	for r := t.head; r != nil; r = r.next {
		if r.pins > 0 || r == keep {
			continue
		}
		if c == nil {
			c = r
			continue
		}
		if !r.touched.Equal(c.touched) {
			break
		}
		if r.id < c.id {
			c = r
		}
	}
	return c
}

// claimLocked removes r from every index, so no other firing can take it.
func (t *Tier) claimLocked(r *registration) *registration {
	if r.opt.Key != "" {
		delete(t.byKey, dedupKey{r.origin.Tool, r.opt.Scope, r.opt.Key})
	}
	gk := groupOf(r)
	if g := t.groups[gk]; g != nil {
		delete(g, r.id)
		if len(g) == 0 {
			delete(t.groups, gk)
		}
	}
	t.unlinkLocked(r)
	t.live--
	r.claimed = true
	t.roomLocked()
	return r
}

// roomLocked wakes every Hold waiting for room.
func (t *Tier) roomLocked() {
	if t.room != nil {
		close(t.room)
		t.room = nil
	}
}

func (t *Tier) pushBackLocked(r *registration) {
	r.prev, r.next = t.tail, nil
	if t.tail != nil {
		t.tail.next = r
	} else {
		t.head = r
	}
	t.tail = r
}

func (t *Tier) unlinkLocked(r *registration) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		t.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		t.tail = r.prev
	}
	r.prev, r.next = nil, nil
}

func (t *Tier) moveToBackLocked(r *registration) {
	if t.tail == r {
		return
	}
	t.unlinkLocked(r)
	t.pushBackLocked(r)
}

// background fires claimed registrations without a caller to wait for
// them; Settled and FireShutdown join them.
func (t *Tier) background(claimed []*registration, reason Reason) {
	if len(claimed) == 0 {
		return
	}
	t.bgMu.Lock()
	if t.bg == 0 {
		t.bgDone = make(chan struct{})
	}
	t.bg++
	t.bgMu.Unlock()
	go func() {
		defer func() {
			t.bgMu.Lock()
			t.bg--
			if t.bg == 0 {
				close(t.bgDone)
			}
			t.bgMu.Unlock()
		}()
		t.fire(context.Background(), claimed, reason)
	}()
}

// fire runs claimed cleanups concurrently, launched newest first, and waits
// until each has returned or been abandoned.
func (t *Tier) fire(ctx context.Context, claimed []*registration, reason Reason) int {
	if len(claimed) == 0 {
		return 0
	}
	slices.SortFunc(claimed, func(a, b *registration) int {
		switch {
		case a.id > b.id:
			return -1
		case a.id < b.id:
			return 1
		}
		return 0
	})
	closing := t.now()
	var wg sync.WaitGroup
	for _, r := range claimed {
		started := make(chan struct{})
		wg.Go(func() { t.deliver(t.close(ctx, r, reason, closing, started)) })
		// Wait until this cleanup is running before launching the next, so
		// the launch order really is newest-first; nobody waits for another
		// cleanup to finish.
		<-started
	}
	wg.Wait()
	return len(claimed)
}

// close runs one cleanup under the timeout and describes what happened. It
// closes started once the cleanup is under way.
func (t *Tier) close(ctx context.Context, r *registration, reason Reason, closing time.Time, started chan<- struct{}) Report {
	rep := Report{
		Tool:      r.origin.Tool,
		Scope:     r.opt.Scope,
		KeyHash:   r.keyHash,
		RunnerID:  r.opt.RunnerID,
		Label:     r.opt.Label,
		Reason:    reason,
		RunID:     r.origin.RunID,
		SessionID: r.origin.SessionID,
		Tenant:    r.origin.Tenant,
		Principal: r.origin.Principal,
		Held:      closing.Sub(r.registered),
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	start := t.now()
	done := make(chan error, 1) // buffered: an abandoned cleanup can still finish
	go func() {
		var err error
		defer func() {
			if v := recover(); v != nil {
				err = &PanicError{Tool: r.origin.Tool, Cleanup: true, Value: v}
			}
			done <- err
		}()
		close(started)
		if r.cleanup != nil {
			err = r.cleanup(cctx)
		}
	}()
	var err error
	select {
	case err = <-done:
	case <-cctx.Done():
		select {
		case err = <-done: // it finished just as the deadline struck
		default:
			if ctx.Err() != nil {
				err = fmt.Errorf("toolsession: cleanup for tool %q abandoned: %w", r.origin.Tool, context.Cause(ctx))
			} else {
				err = &TimeoutError{Tool: r.origin.Tool, Timeout: t.timeout}
			}
		}
	}
	rep.Took = t.now().Sub(start)
	if err != nil {
		rep.Failed = true
		rep.Err = err
	}
	return rep
}

func (t *Tier) deliver(rep Report) {
	defer func() {
		// A broken reporter must not break a firing, and must not be silent.
		if v := recover(); v != nil {
			slog.Error("toolsession: report handler panicked", "tool", rep.Tool, "keyHash", rep.KeyHash, "panic", fmt.Sprint(v))
		}
	}()
	t.report(rep)
}
