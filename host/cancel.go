package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Why a turn was stopped from outside it, besides the shutdown's cut
// (errCut). The cause's text is what the turn log records.
var (
	errCancelled = errors.New("host: the turn was cancelled (POST /v1/sessions/{id}/cancel)")
	errClosing   = fmt.Errorf("%w by closing its conversation (DELETE /v1/sessions/{id})", errCancelled)
	errTimedOut  = errors.New("host: the turn ran past the turn timeout")
)

// turnContexts makes a turn's contexts, detached from its request (a
// client that goes away does not stop its turn): bounded ends at the
// turn timeout or at the shutdown's cut; stop ends with it, and at a
// cancel. The cut and the cancel are set on ctl. end releases them.
func (h *Host) turnContexts(r *http.Request, ctl *turnCtl) (bounded, stop context.Context, end func()) {
	cut, cutTurn := context.WithCancelCause(context.WithoutCancel(r.Context()))
	bounded, endTimer := context.WithTimeoutCause(cut, h.opt.TurnTimeout, errTimedOut)
	stop, cancelTurn := context.WithCancelCause(bounded)
	ctl.cancel, ctl.stop = cutTurn, cancelTurn
	return bounded, stop, func() {
		cancelTurn(nil)
		endTimer()
		cutTurn(nil)
	}
}

// tracking wraps a turn's start so that ctl learns the turn's run id, for
// the cancel's answer.
func (ctl *turnCtl) tracking(h *Host, start func(context.Context, *liveConv) *turnRun) func(context.Context, *liveConv) *turnRun {
	return func(ctx context.Context, lc *liveConv) *turnRun {
		t := start(ctx, lc)
		h.mu.Lock()
		ctl.runID = t.runID
		h.mu.Unlock()
		return t
	}
}

// releaseTurn lets go of the conversation a turn held, then tells whoever
// waits for the turn's end (a close that cancelled it).
func (h *Host) releaseTurn(lc *liveConv, ctl *turnCtl) {
	h.mu.Lock()
	lc.busy = false
	lc.lastUsed = h.now()
	if lc.turn == ctl {
		lc.turn = nil
	}
	h.mu.Unlock()
	close(ctl.done)
}

// turnOf is the turn running on the owner's conversation id (nil when
// none does), and its run id when it has one yet.
func (h *Host) turnOf(o tool.Identity, id string) (*turnCtl, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if lc := h.live[id]; lc != nil && lc.owner == o && lc.turn != nil {
		return lc.turn, lc.turn.runID
	}
	return nil, ""
}

// watchStop turns the end of stop (the shutdown's cut, the turn timeout,
// a cancel) into an Interrupt of the turn through the contract. A
// provider that refuses the interrupt, or that has not ended the turn
// CutGrace after it, has its context cancelled: the turn ends there, and
// the contract makes its session unusable (afterStop closes it). The
// function returned is called once the turn's outputs are over; it waits
// for the watch to finish.
func (h *Host) watchStop(stop context.Context, sess *provider.ValidatedSession, runID string, pcancel context.CancelFunc) func() {
	over := make(chan struct{})
	watched := make(chan struct{})
	unwatch := context.AfterFunc(stop, func() {
		defer close(watched)
		grace, cancel := context.WithTimeout(context.Background(), h.opt.CutGrace)
		defer cancel()
		if err := sess.Interrupt(grace, runID); err != nil {
			pcancel()
			return
		}
		select {
		case <-over:
		case <-grace.Done():
			h.log.Warn("host: the provider did not end an interrupted turn in time; cancelling it", "provider", h.key, "grace", h.opt.CutGrace)
			pcancel()
		}
	})
	return func() {
		close(over)
		if !unwatch() {
			<-watched
		}
	}
}

// afterStop settles the provider's side of a turn that a cancel or the
// turn timeout stopped: a request it raised (or, for a decision not
// begun, the one it waits on) is given up, so nothing waits for a person
// any more; and a session the contract no longer trusts (its turn had to
// be cancelled) is closed now, so its agent stops at once.
func (h *Host) afterStop(stop context.Context, lc *liveConv, sess *provider.ValidatedSession, t *turnRun) {
	if h.stopOf(stop) == nil {
		return
	}
	if t.request != nil || (t.unbegun && t.kind == "decision") {
		h.giveUp(lc, t.runID)
		t.request, t.outcome = nil, provider.OutcomeInterrupted
	}
	if lc.sess == sess && sess.Err() != nil {
		h.closeSession(context.Background(), lc, provider.CloseRequested, "quarantine")
	}
}

// giveUp ends the turn that waits on a request, through the contract, so
// the provider no longer holds it. A provider that fails to (or cannot
// interrupt) has its session closed (reason requested: the pause goes
// with it). A provider that no longer holds the turn has nothing to give
// up.
func (h *Host) giveUp(lc *liveConv, turnID string) {
	s := lc.sess
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.opt.CloseTimeout)
	defer cancel()
	err := s.Interrupt(ctx, turnID)
	if err == nil || provider.HasCode(err, provider.CodeActiveTurnMismatch) {
		return
	}
	h.log.Warn("host: the provider could not give up a waiting turn; closing its session", "session", lc.id, "provider", h.key,
		"code", string(provider.CodeOf(err)), "err", err)
	h.closeSession(ctx, lc, provider.CloseRequested, "quarantine")
}

// stopReason is how a turn stopped by a cancel or the turn timeout is
// recorded and answered.
type stopReason struct {
	outcome string // TurnCancelled or TurnTimedOut
	cause   error  // its text goes to the turn log
	note    string // the transcript's word on it
	answer  func() *apiError
}

// stopOf is why stop ended, when a cancel or the turn timeout ended it;
// nil otherwise (still running, or cut by a shutdown).
func (h *Host) stopOf(stop context.Context) *stopReason {
	cause := context.Cause(stop)
	switch {
	case errors.Is(cause, errCancelled):
		return &stopReason{outcome: TurnCancelled, cause: cause, note: "cancelled: the turn was stopped before it answered",
			answer: func() *apiError {
				return newError(http.StatusConflict, CodeTurnCancelled, "host: the turn was cancelled before it answered; the session goes on: send the next message")
			}}
	case errors.Is(cause, errTimedOut):
		limit := h.opt.TurnTimeout
		return &stopReason{outcome: TurnTimedOut, cause: fmt.Errorf("%w (%s)", cause, limit),
			note: fmt.Sprintf("timed out: the turn ran past the turn timeout (%s) and was stopped", limit),
			answer: func() *apiError {
				return newError(http.StatusGatewayTimeout, CodeTurnTimedOut,
					fmt.Sprintf("host: the turn ran past the turn timeout (%s) and was stopped; the session goes on: send a smaller task, or ask the operator to raise agentry serve --turn-timeout", limit))
			}}
	}
	return nil
}

// settleStopped records a turn that a cancel or the turn timeout stopped
// before it answered: what the person said and what the agent did go to
// the transcript with a word saying it was stopped; a pause it answered or
// raised is spent; the turn log says cancelled or timed_out. It returns
// the transcript's new messages.
func (h *Host) settleStopped(c *Conversation, turn *Turn, out *turnResult, t *turnRun, why *stopReason, lc *liveConv) []Message {
	var add []Message
	if t.kind == "message" {
		add = append(add, Message{Role: "user", Content: t.input, RunID: t.runID})
	}
	add = append(add, t.activityMessages()...)
	add = append(add, Message{Role: "activity", Content: why.note, RunID: t.runID})
	c.State, c.Pending, c.LastRunID = StateOpen, nil, t.runID
	turn.Outcome, turn.Error = why.outcome, clipMessage(why.cause.Error())
	out.Error = why.answer()
	if why.outcome == TurnTimedOut {
		h.metrics.failures.WithLabelValues("turn").Inc()
		h.emit(TypeTurnFailed, &TurnFailedEvent{Error: turn.Error}, lc.id, lc.owner)
	}
	return add
}

// cancelAnswer is the body of a cancel's 202.
type cancelAnswer struct {
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId,omitempty"`
	// Waiting: the turn waited for a decision, and its request was given
	// up before the answer; otherwise the running turn was told to stop
	// and its own request answers with how it ended.
	Waiting bool `json:"waiting,omitempty"`
}

// handleCancel stops the conversation's turn: a running one is
// interrupted through the contract and ends cancelled (its own request is
// answered so); a paused one has its pending request given up. 202 either
// way; 409 no_turn when no turn runs or waits.
func (h *Host) handleCancel(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	id := r.PathValue("id")
	// A turn that ends between the two looks is looked for again.
	for range 3 {
		lc, ae := h.acquire(r.Context(), o, id)
		if ae == nil {
			h.cancelHeld(w, r, lc)
			return
		}
		if ae.Code != CodeSessionBusy {
			writeError(w, ae)
			return
		}
		ctl, runID := h.turnOf(o, id)
		if ctl == nil {
			continue
		}
		ctl.stop(errCancelled)
		writeJSON(w, http.StatusAccepted, cancelAnswer{SessionID: id, RunID: runID})
		return
	}
	writeError(w, newError(http.StatusConflict, CodeSessionBusy, "host: the session is busy closing or being moved, with no turn to cancel; look at it again shortly"))
}

// cancelHeld answers a cancel for a conversation no turn holds: a paused
// turn is given up; otherwise there is nothing to cancel.
func (h *Host) cancelHeld(w http.ResponseWriter, r *http.Request, lc *liveConv) {
	if lc.conv.State == StateClosed {
		writeError(w, newError(http.StatusConflict, CodeNoTurn, "host: this session is closed; no turn runs on it"))
		return
	}
	defer h.release(lc)
	if lc.conv.State != StatePaused {
		writeError(w, newError(http.StatusConflict, CodeNoTurn, "host: no turn is running or waiting on this session; there is nothing to cancel"))
		return
	}
	runID, ae := h.cancelPaused(r, lc)
	if ae != nil {
		writeError(w, ae)
		return
	}
	writeJSON(w, http.StatusAccepted, cancelAnswer{SessionID: lc.id, RunID: runID, Waiting: true})
}

// cancelPaused gives up the request a paused turn waits on, through the
// provider (its session re-opened if it was closed: the provider may
// still hold the pause), and records the turn cancelled.
func (h *Host) cancelPaused(r *http.Request, lc *liveConv) (string, *apiError) {
	p := lc.conv.Pending
	octx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.opt.TurnTimeout)
	defer cancel()
	if ae := h.openSession(octx, lc); ae != nil {
		return "", ae
	}
	h.giveUp(lc, p.TurnID)
	ctx, cancelStore := storeCtx(r)
	defer cancelStore()
	c := lc.conv
	now := h.now().UTC()
	c.State, c.Pending, c.UpdatedAt, c.LastRunID = StateOpen, nil, now, p.TurnID
	add := []Message{{Role: "activity", Content: "cancelled: the turn was given up while it waited for a decision", RunID: p.TurnID}}
	v, err := h.store.Save(ctx, Update{Conversation: c, Append: add,
		Turn: &Turn{RunID: p.TurnID, Kind: "cancel", Outcome: TurnCancelled, Error: errCancelled.Error(), Started: now, Ended: now}})
	if err != nil {
		return "", h.storeError(err)
	}
	c.Version = v
	c.Messages += len(add)
	lc.conv = c
	h.tellConversation(lc, false)
	h.metrics.turns.WithLabelValues("cancel", TurnCancelled).Inc()
	return p.TurnID, nil
}

// acquireStopping takes the conversation for a close: a turn running on
// it is cancelled first, and the close waits (bounded) until the turn has
// been saved.
func (h *Host) acquireStopping(ctx context.Context, o tool.Identity, id string) (*liveConv, *apiError) {
	// The turn's interrupt, its grace, a session close and a store write.
	bound := time.NewTimer(2*h.opt.CutGrace + h.opt.CloseTimeout + 15*time.Second)
	defer bound.Stop()
	for {
		lc, ae := h.acquire(ctx, o, id)
		if ae == nil || ae.Code != CodeSessionBusy {
			return lc, ae
		}
		ctl, _ := h.turnOf(o, id)
		if ctl == nil {
			return nil, ae // held by something else than a turn (another close, an eviction)
		}
		ctl.stop(errClosing)
		select {
		case <-ctl.done:
		case <-bound.C:
			return nil, newError(http.StatusConflict, CodeSessionBusy, "host: the turn running on this session was cancelled and has not ended yet; close the session again shortly")
		case <-ctx.Done():
			return nil, newError(http.StatusConflict, CodeSessionBusy, "host: the request ended while the turn running on this session was being cancelled; close the session again")
		}
	}
}
