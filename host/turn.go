package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// acquire takes the conversation for one request: 404 for anyone but its
// owner, 409 while another request holds it. It loads the conversation
// from the store when it is not in memory.
func (h *Host) acquire(ctx context.Context, o tool.Identity, id string) (*liveConv, *apiError) {
	return h.acquireFor(ctx, o, id, nil)
}

// acquireFor is acquire for a turn: the conversation is taken together
// with ctl, so a cancel finds the turn from the moment it holds it.
func (h *Host) acquireFor(ctx context.Context, o tool.Identity, id string, ctl *turnCtl) (*liveConv, *apiError) {
	if !validSessionID(id) {
		return nil, notFound()
	}
	h.mu.Lock()
	lc, ok := h.live[id]
	h.mu.Unlock()
	if !ok {
		c, err := h.store.Info(ctx, o, id)
		if err != nil {
			return nil, h.storeError(err)
		}
		if c.State == StateClosed {
			// A closed conversation is not held in memory.
			return &liveConv{id: id, owner: o, conv: c, busy: true}, nil
		}
		h.mu.Lock()
		if lc, ok = h.live[id]; !ok {
			lc = &liveConv{id: id, owner: o, lastUsed: h.now(), conv: c}
			h.live[id] = lc
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if lc.owner != o {
		return nil, notFound()
	}
	if lc.busy {
		return nil, newError(http.StatusConflict, CodeSessionBusy, "host: a turn is running on this session; wait for its answer (turns of one session run one at a time)")
	}
	lc.busy, lc.turn = true, ctl
	return lc, nil
}

func (h *Host) release(lc *liveConv) {
	h.mu.Lock()
	lc.busy = false
	lc.lastUsed = h.now()
	h.mu.Unlock()
}

// admitTurn takes a turn slot: 429 past the host's bound or the
// principal's.
func (h *Host) admitTurn(o tool.Identity) *apiError {
	h.mu.Lock()
	switch {
	case h.turns >= h.opt.MaxTurns:
		h.mu.Unlock()
		return h.refuse(o, "turns", h.opt.MaxTurns, 1, CodeTooManyTurns, "host: the host is running as many turns as it allows; retry shortly")
	case h.byOwner[o] >= h.opt.MaxTurnsPerPrincipal:
		h.mu.Unlock()
		return h.refuse(o, "turns_per_principal", h.opt.MaxTurnsPerPrincipal, 1, CodeTooManyTurns,
			fmt.Sprintf("host: you have %d turns running, the most allowed; wait for one to answer", h.opt.MaxTurnsPerPrincipal))
	}
	h.turns++
	h.byOwner[o]++
	h.mu.Unlock()
	return nil
}

func (h *Host) endTurn(o tool.Identity) {
	h.mu.Lock()
	h.turns--
	if h.byOwner[o]--; h.byOwner[o] <= 0 {
		delete(h.byOwner, o)
	}
	h.mu.Unlock()
}

// handleTurn runs one message as a provider turn.
func (h *Host) handleTurn(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	body, ae := h.readBody(w, r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	msg, err := DecodeTurn(body)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	h.runTurn(w, r, o, "message", func(lc *liveConv) *apiError {
		if c := lc.conv; c.State == StatePaused {
			return newError(http.StatusConflict, CodeAwaitingDecision,
				fmt.Sprintf("host: this session waits for a decision on %q (tool %s); answer it with POST /v1/sessions/%s/decision first", c.Pending.Question, c.Pending.Tool, lc.id))
		}
		return nil
	}, func(ctx context.Context, lc *liveConv) *turnRun {
		t := &turnRun{kind: "message", runID: newRunID(), input: msg.Message}
		req := h.turnRequest(lc.id, t.runID, msg.Message)
		req.Limit = lc.budget.limitFor(lc.id, t.runID)
		t.seq = lc.sess.RunTurn(ctx, req)
		return t
	})
}

// handleDecision answers what the session waits for: the request of a
// paused turn (resolved through the provider), or a session interaction.
func (h *Host) handleDecision(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	body, ae := h.readBody(w, r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	dec, err := DecodeDecision(body)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	if dec.Interaction != "" {
		h.answerInteraction(w, r, o, dec)
		return
	}
	var made *Rule
	h.runTurn(w, r, o, "decision", func(lc *liveConv) *apiError {
		if lc.conv.State != StatePaused {
			return newError(http.StatusConflict, CodeNoPendingQuestion, "host: this session waits for no decision; send a message instead")
		}
		if dec.Rule == nil {
			return nil
		}
		// The rule stands before the answer goes: a request the rest of
		// this turn raises is answered by it too.
		ctx, cancel := storeCtx(r)
		defer cancel()
		var ae *apiError
		made, ae = h.makeRule(ctx, lc, *dec.Rule)
		return ae
	}, func(ctx context.Context, lc *liveConv) *turnRun {
		p := lc.conv.Pending
		t := &turnRun{kind: "decision", runID: p.TurnID, made: made}
		t.seq = lc.sess.Resolve(ctx, provider.Resolution{TurnID: p.TurnID, RequestID: p.RequestID, Approve: dec.Approve, Note: dec.Note,
			Limit: lc.budget.limitFor(lc.id, p.TurnID)})
		return t
	})
}

// runTurn is what a message and a decision share: admission, the
// conversation taken for the request, its provider session opened, the
// turn run to a stable boundary, its end saved, then answered in JSON or
// as an event stream. kind is "message" or "decision" (budgets treat
// them apart); check refuses a conversation in the wrong state; start
// begins the provider's side.
func (h *Host) runTurn(w http.ResponseWriter, r *http.Request, o tool.Identity, kind string, check func(*liveConv) *apiError, start func(context.Context, *liveConv) *turnRun) {
	if ae := h.admitTurn(o); ae != nil {
		writeError(w, ae)
		return
	}
	defer h.endTurn(o)
	budget, ae := h.admitBudget(r.Context(), o, kind)
	if ae != nil {
		writeError(w, ae)
		return
	}
	// The turn runs on contexts of its own: a client that goes away does
	// not stop it. The drain bound and the turn timeout end bounded, and a
	// cancel stop too; each becomes an Interrupt (drive).
	ctl := &turnCtl{done: make(chan struct{})}
	bounded, stop, endContexts := h.turnContexts(r, ctl)
	defer endContexts()
	lc, ae := h.acquireFor(r.Context(), o, r.PathValue("id"), ctl)
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer h.releaseTurn(lc, ctl)
	switch {
	case lc.conv.State == StateClosed:
		writeError(w, newError(http.StatusConflict, CodeSessionClosed, "host: this session is closed; open a new one (POST /v1/sessions)"))
		return
	}
	if _, ae := h.agentOf(lc.conv); ae != nil {
		writeError(w, ae)
		return
	}
	if ae := check(lc); ae != nil {
		writeError(w, ae)
		return
	}
	lc.budget = budget

	// The person's other tabs hear the turn begin, and end as saved (this
	// runs before the conversation is let go, so lc.conv is the saved one).
	h.tellConversation(lc, true)
	defer h.tellConversation(lc, false)

	start = ctl.tracking(h, start)
	h.mu.Lock()
	h.running[ctl] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.running, ctl)
		h.mu.Unlock()
	}()

	began := time.Now()
	// A cancel takes effect once the turn begins; the opening is bounded
	// by the turn timeout and the drain bound.
	if ae := h.openSession(bounded, lc); ae != nil {
		writeError(w, ae)
		return
	}
	if wantsStream(r) {
		h.stream(w, r, lc, stop, began, start)
		return
	}
	t := h.drive(stop, lc, start, nil)
	_, out := h.settle(r, lc, t, stop, began)
	if out.Error != nil {
		writeError(w, out.Error)
		return
	}
	status := http.StatusOK
	if out.Awaiting != nil {
		status = http.StatusAccepted
	}
	writeJSON(w, status, out)
}

// openSession makes sure the conversation has a usable provider session:
// Create on its first turn, Resume from the stored binding after a
// restart, an eviction or a quarantine.
func (h *Host) openSession(ctx context.Context, lc *liveConv) *apiError {
	if lc.sess != nil {
		if lc.sess.Err() == nil {
			return nil
		}
		// Quarantined by the contract: close what is left, open afresh.
		h.closeSession(ctx, lc, provider.CloseRequested, "quarantine")
	}
	ag, ae := h.agentOf(lc.conv)
	if ae != nil {
		return ae
	}
	wd, err := ag.workingDir(lc.owner, lc.id)
	if err != nil {
		h.log.Error("host: choosing a session's working directory", "session", lc.id, "err", err)
		return newError(http.StatusInternalServerError, CodeInternal, "host: the session's working directory could not be prepared")
	}
	model := lc.conv.Model
	if model == "" {
		model = ag.model
	}
	cfg, ae := h.withCredentials(ctx, ag, lc.owner, ag.sessionConfig(lc.owner, lc.id, model))
	if ae != nil {
		return ae
	}
	hb := ag.lent.binding(lc.owner, lc.id)
	ask := interactions{h}
	var vs *provider.ValidatedSession
	if lc.conv.Binding == "" {
		vs, err = ag.prov.Create(ctx, provider.CreateRequest{SessionID: lc.id, WorkingDirectory: wd, Configuration: cfg, HostBinding: hb, Interactions: ask})
	} else {
		vs, err = ag.prov.Resume(ctx, provider.ResumeRequest{SessionID: lc.id, WorkingDirectory: wd, Configuration: cfg, HostBinding: hb,
			Binding: lc.conv.Binding, Interactions: ask})
	}
	if err != nil {
		return h.openError(lc, ag, err)
	}
	h.dropUnknownPause(ctx, lc, vs)
	lc.sess = vs
	lc.conv.Provider, lc.conv.Binding = ag.key, vs.Binding()
	return nil
}

// openError maps a refused opening to an answer.
func (h *Host) openError(lc *liveConv, ag *hostedAgent, err error) *apiError {
	h.metrics.failures.WithLabelValues("open").Inc()
	h.log.Warn("host: the provider refused to open a session", "session", lc.id, "agent", ag.name, "provider", ag.key, "code", string(provider.CodeOf(err)), "err", err)
	h.emit(TypeTurnFailed, &TurnFailedEvent{Error: clipMessage("opening the provider session: " + err.Error())}, lc.id, lc.owner)
	what := "opening"
	if lc.conv.Binding != "" {
		what = "re-opening"
	}
	msg := fmt.Sprintf("host: %s this session with provider %s failed", what, ag.key)
	if len(h.agents) > 1 {
		msg = fmt.Sprintf("host: %s this session with agent %s (provider %s) failed", what, ag.name, ag.key)
	}
	if c := provider.CodeOf(err); c != "" {
		msg += " (" + string(c) + ")"
	}
	// What the provider said (an agent that would not start says why), as
	// a failed turn's answer does.
	msg += ": " + clipMessage(err.Error())
	e := newError(http.StatusServiceUnavailable, CodeProviderUnavailable, msg+"; try again, or open a new session if it keeps failing")
	e.retryAfter = 1
	return e
}

// turnRun is one turn in flight: the provider's outputs and what the host
// made of them.
type turnRun struct {
	kind  string // "message" or "decision"
	runID string
	input string // the person's message (kind message)
	seq   func(func(provider.Output, error) bool)

	answer     strings.Builder // the last run of text: what came since the activity before it
	afterText  bool            // an activity came after the answer so far: new text starts a new one
	activities []Message       // what the agent did, for the transcript (bounded)
	request    *provider.Request
	outcome    provider.Outcome
	failure    string // what a failed turn said
	err        error  // the stream broke, or the provider refused
	unbegun    bool   // stopped before the provider was asked anything
	usage      llm.TurnUsage
	reported   bool // the provider reported usage (usage outputs came)
	fz         *fencing
	auto       int   // requests standing rules answered in this turn
	made       *Rule // the rule the decision made, if any
}

// drive runs the turn: it pulls the provider's outputs until a stable
// boundary, handing each to out (the SSE stream) as it comes. The drain
// bound, the turn timeout and a cancel become an Interrupt (watchStop);
// a turn stopped before it began is not begun.
func (h *Host) drive(stop context.Context, lc *liveConv, start func(context.Context, *liveConv) *turnRun, out func(provider.Output)) *turnRun {
	// The provider's context ends only after an interrupt had its chance.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(stop))
	defer pcancel()
	fz := h.newFencing(stop, lc)
	fctx := fz.context(pctx)
	t := start(fctx, lc)
	t.fz = fz
	if !h.begin(stop, lc, t) {
		return t // not begun: nothing ran
	}
	defer fz.release()
	sess := lc.sess
	defer h.afterStop(stop, lc, sess, t)
	unwatch := h.watchStop(stop, sess, t.runID, pcancel)
	defer unwatch()
	if stop.Err() != nil {
		t.err, t.unbegun = context.Cause(stop), true
		return t
	}
	for seq := t.seq; ; {
		asked := t.pull(seq, out)
		if t.err != nil || t.request == nil {
			break
		}
		// A standing rule of the person's answers the request, unless the
		// turn is being stopped: then the person (or the stop) decides.
		var r *Rule
		if stop.Err() == nil {
			r = h.standing(stop, lc, t)
		}
		if r == nil {
			if out != nil {
				out(asked)
			}
			break
		}
		note := clipText(fmt.Sprintf("approved by your rule %s: %s", r.ID, t.request.Tool), maxActivityBytes)
		if len(t.activities) < maxActivities {
			t.activities = append(t.activities, Message{Role: "activity", Content: note})
		}
		if out != nil {
			out(provider.Output{Kind: provider.OutputActivity, SessionID: asked.SessionID, TurnID: asked.TurnID, Text: note})
		}
		seq = lc.sess.Resolve(fctx, provider.Resolution{TurnID: t.runID, RequestID: t.request.ID, Approve: true})
		t.request = nil
	}
	return t
}

// pull takes a stretch of the turn's outputs, to its end or to a request
// (returned, not yet handed to out: a standing rule may answer it).
func (t *turnRun) pull(seq func(func(provider.Output, error) bool), out func(provider.Output)) (asked provider.Output) {
	for o, err := range seq {
		if err != nil {
			t.err = err
			break
		}
		if o.Kind == provider.OutputUsage {
			t.usage.Add(*o.Usage)
			t.reported = true
			continue // for the usage record, not the stream
		}
		if out != nil && o.Kind != provider.OutputRequest {
			out(o)
		}
		switch o.Kind {
		case provider.OutputText:
			// Narration before a tool call is not the answer; a report
			// after the answer (an agent's token usage) does not erase it.
			if t.afterText {
				t.answer.Reset()
				t.afterText = false
			}
			t.answer.WriteString(o.Text)
		case provider.OutputActivity:
			t.failure = o.Text
			t.afterText = true
			if len(t.activities) < maxActivities {
				t.activities = append(t.activities, Message{Role: "activity", Content: clipText(o.Text, maxActivityBytes), Call: callView(o.Call)})
			}
		case provider.OutputRequest:
			t.request, asked = o.Request, o
		case provider.OutputTurnCompleted:
			t.outcome = o.Outcome
		}
	}
	return asked
}

func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			if mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// The transcript keeps what the agent did in a turn (its activity
// outputs: "calling run_code", "run_code returned", with the call's input
// and output where the provider gives them), bounded: a turn's transcript
// grows by at most maxActivities × (maxActivityBytes + 2 × MaxCallBytes).
const (
	maxActivities    = 64
	maxActivityBytes = 2 << 10
)

// MaxCallBytes bounds a tool call's input and output in the transcript
// (CallView): past it, the input is left out and its size said; the output
// is cut and its size said.
const MaxCallBytes = 8 << 10

// callView is what the transcript keeps of a tool call an activity is
// about, bounded; nil for none.
func callView(c *provider.CallDetail) *CallView {
	if c == nil {
		return nil
	}
	v := &CallView{ID: clipText(c.ID, 256), Tool: clipText(c.Tool, 256), IsError: c.IsError}
	if len(c.Input) > MaxCallBytes {
		v.InputCut = len(c.Input)
	} else if len(c.Input) > 0 && json.Valid(c.Input) {
		v.Input = append(json.RawMessage(nil), c.Input...)
	}
	if c.Ended {
		out := c.Output
		if len(out) > MaxCallBytes {
			v.OutputCut = len(out)
			out = clipText(out, MaxCallBytes)
		}
		v.Output = &out
	}
	return v
}

// activityMessages are a turn's activities as transcript entries.
func (t *turnRun) activityMessages() []Message {
	out := make([]Message, 0, len(t.activities))
	for _, a := range t.activities {
		a.RunID = t.runID
		out = append(out, a)
	}
	return out
}

// turnResult is the body of a turn's answer: output, or a question.
type turnResult struct {
	RunID    string   `json:"runId,omitempty"`
	Output   *string  `json:"output,omitempty"`
	Awaiting *Pending `json:"awaiting,omitempty"`
	// Rule is the standing rule the decision made, if it made one.
	Rule  *ruleView `json:"rule,omitempty"`
	Error *apiError `json:"error,omitempty"`
}

// settle records how a turn ended — store first, then the answer — and
// returns the outcome recorded and the body to send. Nothing is answered
// that is not saved.
func (h *Host) settle(r *http.Request, lc *liveConv, t *turnRun, stop context.Context, began time.Time) (string, turnResult) {
	if outcome, out, ok := h.settleFenced(r, lc, t, began); ok {
		return outcome, out
	}
	defer h.flushCarried(t)
	ctx, cancel := storeCtx(r)
	defer cancel()
	now := h.now().UTC()
	c := lc.conv
	if t.kind == "message" {
		c.Turns++
	}
	c.UpdatedAt = now
	turn := &Turn{RunID: t.runID, Kind: t.kind, Started: now.Add(-time.Since(began)), Ended: now}
	out := turnResult{RunID: t.runID}
	if t.made != nil {
		v := viewRule(*t.made)
		out.Rule = &v
	}
	var add []Message
	cut := errors.Is(context.Cause(stop), errCut)
	stopped := h.stopOf(stop) // a cancel or the turn timeout
	failed := func(msg string) {
		turn.Outcome, turn.Error = TurnFailed, msg
		out.Error = newError(http.StatusInternalServerError, CodeTurnFailed, clipMessage(msg))
		if cut {
			turn.Outcome = TurnCut
			out.Error = newError(http.StatusServiceUnavailable, CodeTurnCut, "host: the host shut down before the turn finished; the turn was recorded as failed; send the message again")
			out.Error.retryAfter = 5
		}
		if t.kind == "decision" {
			c.State, c.Pending = StateOpen, nil // the pause is spent: the turn went on and failed
		}
		h.metrics.failures.WithLabelValues("turn").Inc()
		h.emit(TypeTurnFailed, &TurnFailedEvent{Error: clipMessage(msg)}, lc.id, lc.owner)
	}

	switch {
	case t.err != nil && errors.Is(t.err, provider.ErrNotStarted):
		// Refused before it began: nothing changed.
		return "", turnResult{Error: newError(http.StatusConflict, CodeSessionBusy, "host: the agent could not start the turn now; try again")}
	case t.err != nil && provider.HasCode(t.err, provider.CodeConcurrentTurn), t.err != nil && provider.HasCode(t.err, provider.CodeRequestPending):
		return "", turnResult{Error: newError(http.StatusConflict, CodeSessionBusy, "host: a turn is running on this session; wait for its answer")}
	case stopped != nil && (t.err != nil || t.outcome != provider.OutcomeCompleted):
		add = h.settleStopped(&c, turn, &out, t, stopped, lc)
	case t.err != nil && errors.Is(t.err, toolsession.ErrCapacity):
		// Every live tool session is busy and none came free in time: the
		// agent started nothing; the person retries.
		turn.Outcome, turn.Error = TurnFailed, clipMessage(t.err.Error())
		if t.kind == "decision" {
			c.State, c.Pending = StateOpen, nil
		}
		out.Error = newError(http.StatusTooManyRequests, CodeCapacity,
			"host: every live tool session is busy with work in flight and none came free in time; retry shortly")
		out.Error.retryAfter = 5
		h.metrics.refused.WithLabelValues("capacity").Inc()
		h.emit(TypeAdmissionRefused, &AdmissionRefused{Limit: "capacity", RetryAfter: 5}, lc.id, lc.owner)
	case t.err != nil && t.kind == "decision" && provider.HasCode(t.err, provider.CodeRequestResolutionMismatch):
		// The provider no longer holds the request (it could not bring
		// the pause back after a restart or an eviction): the pause is
		// given up, and the person told so.
		c.State, c.Pending = StateOpen, nil
		turn.Outcome, turn.Error = TurnAbandoned, "host: the provider no longer holds this pause; it was given up"
		out.Error = newError(http.StatusConflict, CodeNoPendingQuestion,
			"host: the agent no longer holds this question (it was restarted or evicted); the pause was given up; send the message again")
	case t.err != nil:
		failed(t.err.Error())
	case t.request != nil:
		if t.kind == "message" {
			add = append(add, Message{Role: "user", Content: t.input, RunID: t.runID})
		}
		add = append(add, t.activityMessages()...)
		c.State = StatePaused
		c.Pending = &Pending{Question: t.request.Prompt, Tool: t.request.Tool, Kind: string(t.request.Kind), RequestID: t.request.ID, TurnID: t.runID}
		c.Pending.Args, c.Pending.ArgsCut = pendingArgs(t.request.Args)
		c.LastRunID = t.runID
		turn.Outcome = TurnPaused
		out.Awaiting = c.Pending
	case t.outcome == provider.OutcomeCompleted:
		if t.kind == "message" {
			add = append(add, Message{Role: "user", Content: t.input, RunID: t.runID})
		}
		add = append(add, t.activityMessages()...)
		answer := t.answer.String()
		add = append(add, Message{Role: "assistant", Content: answer, RunID: t.runID})
		c.State, c.Pending, c.LastRunID = StateOpen, nil, t.runID
		turn.Outcome = TurnAnswered
		out.Output = &answer
	case t.outcome == provider.OutcomeInterrupted && !cut:
		turn.Outcome = TurnInterrupted
		failed("host: the agent ended the turn before it answered")
		turn.Outcome = TurnInterrupted
	default:
		msg := t.failure
		if msg == "" {
			msg = "the turn failed"
		}
		failed("host: " + msg)
	}

	turn.Usage = h.usageRecord(lc, t, turn)
	v, err := h.store.Save(ctx, Update{Conversation: c, Append: add, Turn: turn, Epoch: t.fz.epoch(), Records: t.fz.scope.take()})
	if err != nil {
		return "", turnResult{Error: h.storeError(err)}
	}
	c.Version = v
	c.Messages += len(add)
	lc.conv = c
	h.metrics.countUsage(turn.Usage)
	h.totals.add(turn.Usage)
	h.metrics.turns.WithLabelValues(t.kind, turn.Outcome).Inc()
	h.metrics.durations.WithLabelValues(t.kind, turn.Outcome).Observe(time.Since(began).Seconds())
	return turn.Outcome, out
}

func clipMessage(s string) string {
	if len(s) <= 1000 {
		return s
	}
	return s[:1000] + "…"
}

// handleClose closes the conversation; a turn running on it is cancelled
// first (acquireStopping).
func (h *Host) handleClose(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	id := r.PathValue("id")
	lc, ae := h.acquireStopping(r.Context(), o, id)
	if ae != nil {
		writeError(w, ae)
		return
	}
	if lc.conv.State == StateClosed {
		w.WriteHeader(http.StatusNoContent) // closing twice is a no-op
		return
	}
	defer h.release(lc)
	ctx, cancel := storeCtx(r)
	defer cancel()
	h.dropAsking(lc)
	n := 0
	if h.closeSession(ctx, lc, provider.CloseRequested, "close") {
		n = 1
	}
	c := lc.conv
	outcome := TurnClosed
	if c.State == StatePaused {
		outcome = TurnAbandoned
	}
	now := h.now().UTC()
	c.State, c.Pending, c.UpdatedAt = StateClosed, nil, now
	v, err := h.store.Save(ctx, Update{Conversation: c, Turn: &Turn{RunID: c.LastRunID, Kind: "close", Outcome: outcome, Started: now, Ended: now},
		Epoch: h.epochOf(id)})
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	c.Version = v
	lc.conv = c
	h.tellConversation(lc, false)
	h.mu.Lock()
	delete(h.live, id)
	h.mu.Unlock()
	h.releaseLease(ctx, id)
	if h.opt.DropWorkspace != nil {
		// The workspace goes with the conversation; the transcript stays.
		if err := h.opt.DropWorkspace(o, id); err != nil {
			h.log.Error("host: removing a closed conversation's workspace", "session", id, "err", err)
		}
	}
	h.emit(TypeConversationClosed, &ConversationEvent{ToolSessionsClosed: n, Reason: string(toolsession.ReasonSessionEnd)}, id, o)
	w.WriteHeader(http.StatusNoContent)
}

// pendingArgs keeps a request's arguments when they are a JSON object
// within MaxPendingArgs; past it, only their size (the person is told
// they were too large to show).
func pendingArgs(a json.RawMessage) (json.RawMessage, int) {
	a = bytes.TrimSpace(a)
	switch {
	case len(a) == 0 || a[0] != '{' || !json.Valid(a):
		return nil, 0
	case len(a) > MaxPendingArgs:
		return nil, len(a)
	}
	return bytes.Clone(a), 0
}
