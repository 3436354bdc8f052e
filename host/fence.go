package host

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Fencing: a replica never acts for a conversation it may have lost.
//
// Each lease it holds has a deadline of its own, on its monotonic clock:
// from the start of the last claim or renewal that succeeded, a tenth
// short of the lease (replicas.trust). A turn runs under a fence that
// checks that deadline before every step the provider takes (its model
// and tool calls, through provider.CheckStep) and before the turn's
// store writes; a timer cuts the turn when the deadline passes, and a
// renewal that finds the lease gone cuts it at once: the turn is
// interrupted and the provider session closed (its tool sessions and
// agent process stop), before another replica can take the conversation
// over. Every write of the conversation carries the lease epoch, and the
// store refuses an older one, so a replica that lost the conversation
// changes nothing of it. A turn is recorded as begun (Store.BeginTurn)
// before its first step that may change the world (a tool call, a prompt
// to an agent process), so the replica that takes the conversation over
// records one that was cut, if the replica that ran it could not; a turn
// that only called the model writes nothing more than its end.

// errLeaseLost is why a fenced turn stops.
var errLeaseLost = errors.New("host: this replica can no longer be sure it holds the conversation (its lease deadline passed, or another replica took the conversation over)")

// lostNote is what the transcript and the turn log say of a lost turn.
const lostNote = "the turn was cut because the replica running it could no longer be sure it held the conversation; the code may have run in part: check its effects before repeating it"

// turnFence is a running turn's hold on its conversation: the lease epoch
// it runs under, checked against the lease's deadline.
type turnFence struct {
	r     *replicas
	id    string
	epoch int64

	mu    sync.Mutex // guards timer, cut and done
	timer *time.Timer
	cut   func(error)
	done  bool

	tripped atomic.Bool
}

// fenceFor begins guarding a turn of conversation id: nil when this
// replica cannot be sure it holds the lease now.
func (r *replicas) fenceFor(id string) *turnFence {
	r.mu.Lock()
	defer r.mu.Unlock()
	hl := r.held[id]
	if hl == nil || !time.Now().Before(hl.until) {
		return nil
	}
	f := &turnFence{r: r, id: id, epoch: hl.epoch}
	r.fences[id] = f
	return f
}

// check reports errLeaseLost once the lease's deadline has passed or the
// lease was lost, and then cuts the turn; it reads the clock, so a step
// it guards is refused even before the timer's cut has reached the turn.
func (f *turnFence) check() error {
	f.r.mu.Lock()
	hl := f.r.held[f.id]
	ok := hl != nil && hl.epoch == f.epoch && time.Now().Before(hl.until)
	f.r.mu.Unlock()
	if ok {
		return nil
	}
	f.trip()
	return errLeaseLost
}

// arm makes the fence cut the turn with cut when the deadline passes.
func (f *turnFence) arm(cut func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
	f.timer = time.AfterFunc(0, f.expire) // looks at the deadline at once, then waits for it
}

// expire runs at the deadline: a lease renewed meanwhile moves it on.
func (f *turnFence) expire() {
	f.r.mu.Lock()
	hl := f.r.held[f.id]
	var left time.Duration
	if hl != nil && hl.epoch == f.epoch {
		left = time.Until(hl.until)
	}
	f.r.mu.Unlock()
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		return
	}
	if left > 0 {
		f.timer.Reset(left)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	f.trip()
}

// trip cuts the turn, once, on a goroutine of its own.
func (f *turnFence) trip() {
	if f.tripped.Swap(true) {
		return
	}
	f.mu.Lock()
	cut, done := f.cut, f.done
	f.mu.Unlock()
	if cut != nil && !done {
		go cut(errLeaseLost)
	}
}

// release stops guarding the turn (it ended); check still answers.
func (f *turnFence) release() {
	f.mu.Lock()
	f.done = true
	if f.timer != nil {
		f.timer.Stop()
	}
	f.mu.Unlock()
	f.r.mu.Lock()
	if f.r.fences[f.id] == f {
		delete(f.r.fences, f.id)
	}
	f.r.mu.Unlock()
}

// fencing is what a turn carries of the fence: its scope for the
// providers' records, the fence itself (nil without replicas), and how
// it ended when the fence stopped it.
type fencing struct {
	scope   *turnScope
	fence   *turnFence
	forward string // the forwarding replica's id of the request, if any

	// refused: the turn must not go on (not begun, or its record refused
	// before its first step that could change anything); nothing that
	// could ran.
	refused atomic.Pointer[apiError]
	lost    atomic.Bool // the fence cut the turn
	closed  atomic.Bool // the cut closed the provider session

	beginOnce sync.Once
	beginFn   func() error // records the turn as begun (set by Host.begin)
	beginErr  error
	begun     atomic.Bool // the store shows the turn in flight
}

// newFencing prepares a turn's fencing. With replicas, the turn runs only
// on a lease this replica surely holds.
func (h *Host) newFencing(ctx context.Context, lc *liveConv) *fencing {
	fz := &fencing{}
	if h.rep == nil {
		fz.scope = newTurnScope(h.store, nil, nil)
		return fz
	}
	fz.forward, _ = ctx.Value(forwardIDKey{}).(string)
	if fz.fence = h.rep.fenceFor(lc.id); fz.fence == nil {
		fz.refused.Store(movedError())
		fz.scope = newTurnScope(h.store, nil, nil)
		return fz
	}
	f := &Fence{Owner: lc.owner, Conversation: lc.id, Epoch: fz.fence.epoch}
	fz.scope = newTurnScope(h.store, f, fz.fence.check)
	return fz
}

// context is the turn's context as the provider gets it.
func (fz *fencing) context(ctx context.Context) context.Context {
	ctx = context.WithValue(ctx, turnScopeKey{}, fz.scope)
	if fz.fence != nil {
		ctx = provider.WithStepCheck(ctx, fz.check)
	}
	return ctx
}

// check is the provider's step check: the lease's deadline, and before
// the first step that may change the world, the turn's record in the
// store (once; every such step waits for it, and none goes on without it).
func (fz *fencing) check(step provider.Step) error {
	if err := fz.fence.check(); err != nil {
		return err
	}
	if step == provider.StepModel || fz.beginFn == nil {
		return nil
	}
	fz.beginOnce.Do(func() {
		if fz.beginErr = fz.beginFn(); fz.beginErr != nil {
			fz.fence.trip() // the turn stops here
		}
	})
	return fz.beginErr
}

// epoch is the lease epoch the turn's writes carry (0 without replicas).
func (fz *fencing) epoch() int64 {
	if fz == nil || fz.fence == nil {
		return 0
	}
	return fz.fence.epoch
}

func (fz *fencing) release() {
	if fz.fence != nil {
		fz.fence.release()
	}
}

// begin readies a turn to run under its fence (with replicas): the record
// of it in the store, written before its first step that may change the
// world (fencing.check), and the timer that cuts it at the lease's
// deadline. false: the turn must not run (fz.refused says why).
func (h *Host) begin(ctx context.Context, lc *liveConv, t *turnRun) bool {
	fz := t.fz
	if fz.refused.Load() != nil {
		return false
	}
	if fz.fence == nil {
		return true
	}
	if err := fz.fence.check(); err != nil {
		fz.refused.Store(movedError())
		return false
	}
	b := Begun{RunID: t.runID, Kind: t.kind, Input: t.input, Forward: fz.forward, Started: h.now().UTC()}
	fz.beginFn = func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.rep.ttl/3)
		defer cancel()
		err := h.store.BeginTurn(sctx, lc.owner, lc.id, fz.fence.epoch, b)
		switch {
		case err == nil:
			fz.begun.Store(true)
			return nil
		case errors.Is(err, ErrFenced), errors.Is(err, ErrForwardVoided):
			h.log.Warn("host: a turn was stopped before it could change anything: the conversation is no longer this replica's to run", "session", lc.id, "err", err)
			fz.refused.Store(movedError())
		default:
			fz.refused.Store(h.storeError(err))
		}
		return err
	}
	if t.kind == "message" {
		h.rep.noteTold(lc.id) // the note goes with the turn
	}
	sess := lc.sess
	fz.fence.arm(func(err error) { h.cutLost(lc, t, sess, err) })
	return true
}

// cutLost stops a turn whose fence tripped: interrupted, and its provider
// session closed, so its tool sessions and agent process stop now.
func (h *Host) cutLost(lc *liveConv, t *turnRun, sess *provider.ValidatedSession, err error) {
	t.fz.lost.Store(true)
	h.log.Warn("host: cutting a turn: this replica can no longer be sure it holds the conversation", "session", lc.id, "run", t.runID)
	ctx, cancel := context.WithTimeout(context.Background(), h.opt.CloseTimeout)
	defer cancel()
	_ = sess.Interrupt(ctx, t.runID) // a provider without interrupts stops at the close
	t.fz.closed.Store(true)
	if cerr := sess.Close(ctx, provider.CloseEvicted); cerr != nil {
		h.cleanups.add(ctx, lc, "lost", cerr)
	}
}

func movedError() *apiError {
	e := newError(http.StatusServiceUnavailable, CodeSessionMoved,
		"host: this session moved to another replica before the turn could change anything; send it again")
	e.retryAfter = 1
	return e
}

func turnLostError() *apiError {
	return newError(http.StatusInternalServerError, CodeTurnLost,
		"host: the turn was cut because the replica running it could no longer be sure it held this session (another replica may hold it now); "+
			"the code may have run in part: check its effects (GET /v1/sessions/{id}/turns and /messages) before sending it again")
}

// settleFenced answers a turn the fence refused or cut, in place of
// settle; ok false leaves the turn to settle.
func (h *Host) settleFenced(r *http.Request, lc *liveConv, t *turnRun, began time.Time) (outcome string, out turnResult, ok bool) {
	fz := t.fz
	switch {
	case fz == nil:
		return "", turnResult{}, false
	case fz.refused.Load() != nil:
		// Nothing that could change anything ran: the turn leaves no
		// trace, not even the agent's record of it.
		fz.scope.take()
		if fz.closed.Load() {
			h.letGo(lc)
		}
		return "", turnResult{Error: fz.refused.Load()}, true
	case !fz.lost.Load() && (fz.fence == nil || fz.fence.check() == nil):
		if notStarted(t.err) {
			h.unbegin(r, lc, t) // settle answers it and saves nothing
		}
		return "", turnResult{}, false // a store write under a lease still surely held
	}
	return TurnLost, h.settleLost(r, lc, t, began), true
}

// notStarted reports the provider's refusals of a turn that did not
// start (settle saves nothing for them).
func notStarted(err error) bool {
	return err != nil && (errors.Is(err, provider.ErrNotStarted) ||
		provider.HasCode(err, provider.CodeConcurrentTurn) || provider.HasCode(err, provider.CodeRequestPending))
}

// unbegin takes back the record of a turn begun that did not start.
func (h *Host) unbegin(r *http.Request, lc *liveConv, t *turnRun) {
	if !t.fz.begun.Load() {
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	if err := h.store.BeginTurn(ctx, lc.owner, lc.id, t.fz.epoch(), Begun{}); err != nil {
		h.log.Warn("host: clearing the record of a turn that did not start", "session", lc.id, "err", err)
	}
}

// settleLost records a lost turn, if no newer holder has, and lets the
// conversation go: another replica may hold it now.
func (h *Host) settleLost(r *http.Request, lc *liveConv, t *turnRun, began time.Time) turnResult {
	ctx, cancel := storeCtx(r)
	defer cancel()
	now := h.now().UTC()
	c := lc.conv
	var add []Message
	if t.kind == "message" {
		c.Turns++
		add = append(add, Message{Role: "user", Content: t.input, RunID: t.runID})
	}
	add = append(add, t.activityMessages()...)
	add = append(add, Message{Role: "activity", Content: lostNote, RunID: t.runID})
	c.State, c.Pending, c.LastRunID, c.UpdatedAt = StateOpen, nil, t.runID, now
	turn := &Turn{RunID: t.runID, Kind: t.kind, Outcome: TurnLost, Error: lostNote, Started: now.Add(-time.Since(began)), Ended: now}
	turn.Usage = h.usageRecord(lc, t, turn)
	_, err := h.store.Save(ctx, Update{Conversation: c, Append: add, Turn: turn, Epoch: t.fz.epoch(), Records: t.fz.scope.take()})
	switch {
	case errors.Is(err, ErrFenced) && t.fz.begun.Load():
		h.log.Warn("host: a lost turn is recorded by the replica that holds the session now", "session", lc.id, "run", t.runID)
	case errors.Is(err, ErrFenced):
		// The replica holding it now cannot know of a turn that changed
		// nothing yet: its turn log hears of it from here (the transcript
		// is that replica's to write).
		if aerr := h.appendTurn(ctx, lc.id, lc.owner, turn); aerr != nil {
			h.log.Error("host: recording a lost turn in the turn log", "session", lc.id, "run", t.runID, "err", aerr)
		}
	case err != nil:
		h.log.Error("host: recording a lost turn", "session", lc.id, "run", t.runID, "err", err)
	default:
		h.metrics.countUsage(turn.Usage)
	}
	if !t.fz.closed.Load() {
		h.closeSession(ctx, lc, provider.CloseEvicted, "lost")
	}
	h.letGo(lc)
	h.metrics.failures.WithLabelValues("turn").Inc()
	h.metrics.turns.WithLabelValues(t.kind, TurnLost).Inc()
	h.emit(TypeTurnFailed, &TurnFailedEvent{Error: lostNote}, lc.id, lc.owner)
	return turnResult{RunID: t.runID, Error: turnLostError()}
}

// letGo forgets a conversation this replica may no longer hold: its
// provider session (closed already), its place in memory, its lease.
func (h *Host) letGo(lc *liveConv) {
	lc.sess = nil
	h.mu.Lock()
	if h.live[lc.id] == lc {
		delete(h.live, lc.id)
	}
	h.mu.Unlock()
	h.rep.forget(lc.id)
}

// flushCarried writes the providers' records a turn left for a save that
// did not come (each on its own, under the turn's fence).
func (h *Host) flushCarried(t *turnRun) {
	if t.fz == nil || t.fz.scope.records == nil {
		return
	}
	for _, w := range t.fz.scope.take() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := t.fz.scope.records.SaveRecord(ctx, w); err != nil {
			h.log.Error("host: writing a provider's record of a turn the host did not save", "err", err)
		}
		cancel()
	}
}

// settleOrphan records the turn a replica began on the conversation and
// never saved the end of (it stopped, or lost the lease): completed when
// the provider's record shows the turn ended, lost otherwise. It runs on
// a replica that just took the lease (epoch), and returns what the model
// is to be told of it ("" for nothing).
func (h *Host) settleOrphan(ctx context.Context, o tool.Identity, id string, epoch int64) string {
	c, err := h.store.Info(ctx, o, id)
	if err != nil || c.Begun == nil {
		return ""
	}
	b := c.Begun
	outcome, note := TurnLost, lostNote
	if rs, ok := h.store.(Records); ok && c.Binding != "" {
		if done, err := rs.Marked(ctx, c.Binding, b.RunID); err == nil && done {
			outcome, note = TurnCompleted, "the replica running the turn stopped before it recorded the end; the agent finished the turn (its answer is in the agent's record, not in this transcript)"
		}
	}
	now := h.now().UTC()
	var add []Message
	if b.Kind == "message" {
		c.Turns++
		add = append(add, Message{Role: "user", Content: b.Input, RunID: b.RunID})
	}
	add = append(add, Message{Role: "activity", Content: note, RunID: b.RunID})
	if b.Kind == "decision" {
		c.State, c.Pending = StateOpen, nil // the pause was spent when the turn went on
	}
	c.LastRunID, c.UpdatedAt = b.RunID, now
	turn := &Turn{RunID: b.RunID, Kind: b.Kind, Outcome: outcome, Error: note, Started: b.Started, Ended: now}
	if _, err := h.store.Save(ctx, Update{Conversation: c, Append: add, Turn: turn, Epoch: epoch}); err != nil {
		h.log.Error("host: recording the turn a replica that stopped left in flight", "session", id, "run", b.RunID, "err", err)
		return ""
	}
	h.metrics.turns.WithLabelValues(b.Kind, outcome).Inc()
	if outcome == TurnCompleted {
		return ""
	}
	return "A turn was running when it moved, and was cut: the code it ran may have taken effect in part; check before redoing it."
}

// forwardIDKey carries, in a forwarded request's context, the id its
// forwarder gave it.
type forwardIDKey struct{}

// epochOf is the lease epoch this replica holds conversation id under (0
// without replicas, or when it holds none).
func (h *Host) epochOf(id string) int64 {
	if h.rep == nil {
		return 0
	}
	h.rep.mu.Lock()
	defer h.rep.mu.Unlock()
	if hl := h.rep.held[id]; hl != nil {
		return hl.epoch
	}
	return 0
}

// dropUnknownPause gives up a pause a resumed provider session comes back
// waiting on when the conversation holds no such pause: a turn the host
// never recorded as paused (it was lost, or its replica stopped between
// the provider storing the pause and the host saving the turn). Left
// there, it would refuse every turn of the conversation.
func (h *Host) dropUnknownPause(ctx context.Context, lc *liveConv, vs *provider.ValidatedSession) {
	turnID, _, waiting := vs.Pending()
	if !waiting {
		return
	}
	if p := lc.conv.Pending; lc.conv.State == StatePaused && p != nil && p.TurnID == turnID {
		return
	}
	if err := vs.Interrupt(ctx, turnID); err != nil {
		h.log.Warn("host: giving up a pause the conversation does not hold", "session", lc.id, "err", err)
	}
}
