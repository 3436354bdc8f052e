package provider

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// ValidatedSession is a provider session behind the contract. It runs the
// turn state machine (one turn at a time; a waiting request blocks new
// turns), checks every output, quarantines itself when the provider can no
// longer be trusted (every later call but Close is refused with
// session_unusable), and makes Close idempotent and retryable. It
// implements every session port; one the capabilities do not declare
// refuses with input_capability_mismatch. Safe for concurrent use.
type ValidatedSession struct {
	v           *Validated
	id          string
	mode        string
	inner       Session
	binding     Binding
	lease       *lease
	interacts   *interactionOwner // nil when the provider was handed none
	interrupter Interrupter
	steerer     Steerer
	cleanup     retrier

	mu             sync.Mutex
	phase          phase
	turnID         string
	pending        *Request
	turnStart      time.Time
	turns          idSet
	requests       idSet
	busy           int // interrupts and steers in flight
	closing        bool
	ending         atomic.Bool // closing || closed, for the per-output check
	closed         bool
	broken         error
	reason         CloseReason
	providerClosed bool
}

type phase int

const (
	idle    phase = iota
	running       // a turn's outputs are being pulled, or it is being interrupted
	waiting       // the active turn has one open request
)

var (
	_ Session     = (*ValidatedSession)(nil)
	_ Interrupter = (*ValidatedSession)(nil)
	_ Steerer     = (*ValidatedSession)(nil)
)

// adopt checks a candidate session and wraps it. A rejected candidate is
// closed (reason contract_rejected), and its lease released, before the
// error returns.
func (v *Validated) adopt(ctx context.Context, o opening, cand Session, l *lease, ia *interactionOwner, obs *observer, resumed, source Binding) (*ValidatedSession, error) {
	key := v.caps.ProviderKey
	s := &ValidatedSession{v: v, id: o.sessionID, mode: o.mode, inner: cand, lease: l, interacts: ia}
	s.cleanup.fn = s.doClose
	var calls int
	var reported Binding
	if obs != nil {
		calls, reported = obs.seal(s)
	}
	var b Binding
	if err := safely("the provider's Binding", func() error { b = cand.Binding(); return nil }); err != nil {
		ia.end()
		return nil, v.reject(ctx, cand, l, &OperationError{Provider: key, Op: o.mode, Started: true, Err: err})
	}
	s.binding = b
	s.interrupter, _ = cand.(Interrupter)
	s.steerer, _ = cand.(Steerer)

	var bad *ContractError
	switch {
	case obs != nil && calls == 0:
		bad = violation(key, CodeBindingCallbackMissing, "the provider's %s returned without reporting a binding", o.mode)
	case obs != nil && calls > 1:
		bad = violation(key, CodeBindingCallbackRepeated, "the provider's %s reported a binding %d times", o.mode, calls)
	case CheckID(string(b)) != nil:
		bad = &ContractError{Provider: key, Code: CodeInvalidBinding, Message: "the session's binding is malformed", Err: CheckID(string(b))}
	case obs != nil && reported != b:
		bad = violation(key, CodeBindingCallbackMismatch, "the session's binding differs from the one reported")
	case o.mode == "resume" && b != resumed:
		bad = violation(key, CodeResumeBindingMismatch, "the resumed session has a different binding")
	case o.mode == "branch" && b == source:
		bad = violation(key, CodeBranchBindingReused, "the branch has its source's binding")
	case v.caps.Turns.Interrupt != (s.interrupter != nil):
		bad = portMismatch(key, "interrupt (Interrupter)", v.caps.Turns.Interrupt)
	case v.caps.Turns.Steer != (s.steerer != nil):
		bad = portMismatch(key, "steer (Steerer)", v.caps.Turns.Steer)
	case v.caps.Sessions.ResumePending != isPender(cand):
		bad = portMismatch(key, "resume pending (Pender)", v.caps.Sessions.ResumePending)
	}
	if bad == nil && o.mode == "resume" && v.caps.Sessions.ResumePending {
		bad = s.restorePending(cand.(Pender))
	}
	if bad != nil {
		// Torn down first: a rejected session asks nobody anything.
		ia.end()
		return nil, v.reject(ctx, cand, l, bad)
	}
	if v.emitting() {
		v.emit(s.id, TypeSessionOpened, &SessionEvent{Provider: key, Instance: v.opt.instance, Mode: o.mode})
	}
	return s, nil
}

func isPender(s Session) bool {
	_, ok := s.(Pender)
	return ok
}

// restorePending puts a resumed session in the waiting state its provider
// reports, after checking the request as if the turn had just raised it.
func (s *ValidatedSession) restorePending(p Pender) *ContractError {
	key := s.v.caps.ProviderKey
	var turnID string
	var req Request
	var ok bool
	if err := safely("the provider's Pending", func() error { turnID, req, ok = p.Pending(); return nil }); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidOperationResult, Message: "the resumed session's pending request could not be read", Err: err}
	}
	if !ok {
		return nil
	}
	if err := CheckID(turnID); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidOperationResult, Message: "the pending turn id is malformed", Err: err}
	}
	if err := s.checkRequest(&req); err != nil {
		return err
	}
	r := req
	r.Schema = clone(req.Schema)
	s.turns.add(turnID)
	s.requests.add(r.ID)
	s.phase, s.turnID, s.pending, s.turnStart = waiting, turnID, &r, time.Now()
	return nil
}

// Pending returns the active turn's open request: the one a turn ended
// at, or the one a resumed session came back waiting on. ok is false when
// no request is pending.
func (s *ValidatedSession) Pending() (turnID string, req Request, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != waiting || s.busy > 0 || s.pending == nil {
		return "", Request{}, false
	}
	r := *s.pending
	r.Schema = clone(r.Schema)
	return s.turnID, r, true
}

// reject closes a candidate the wrapper refused, and releases its lease.
// When that cleanup fails the error is a *CleanupError (or
// *HostBindingCleanupError when only the release failed) holding cause
// and the cleanup's failures.
func (v *Validated) reject(ctx context.Context, cand Session, l *lease, cause error) error {
	key := v.caps.ProviderKey
	closed := false
	r := newRetrier(func(ctx context.Context) error {
		var errs errList
		if l != nil {
			l.halt()
		}
		if !closed {
			if err := safely("the provider's close", func() error { return cand.Close(ctx, CloseContractRejected) }); err != nil {
				errs = append(errs, &OperationError{Provider: key, Op: "close", Started: true, Err: err})
			} else {
				closed = true
			}
		}
		if l != nil {
			if err := l.release.do(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errs.orNil()
	})
	cctx, cancel := v.cleanupContext(ctx)
	defer cancel()
	err := r.do(cctx)
	if err == nil {
		return cause
	}
	v.emitProblem("", CodeOf(cause), err)
	ce := CleanupError{Provider: key, Errs: flatten(cause, err), retry: r}
	if closed {
		return &HostBindingCleanupError{ce}
	}
	return &ce
}

// ID returns the host's id for the session.
func (s *ValidatedSession) ID() string { return s.id }

// Binding returns the provider's native identity of the session.
func (s *ValidatedSession) Binding() Binding { return s.binding }

// Mode says how the session was opened: create, resume or branch.
func (s *ValidatedSession) Mode() string { return s.mode }

// Err returns nil while the session is usable; otherwise the error every
// call but Close now returns (session_closed or session_unusable).
func (s *ValidatedSession) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usableLocked()
}

func (s *ValidatedSession) usableLocked() error {
	key := s.v.caps.ProviderKey
	switch {
	case s.closed:
		return violation(key, CodeSessionClosed, "the session is closed")
	case s.closing:
		return violation(key, CodeSessionClosed, "the session is closing")
	case s.broken != nil:
		return &ContractError{Provider: key, Code: CodeSessionUnusable, Message: "the session can no longer be trusted", Err: s.broken}
	}
	return nil
}

// quarantine marks the session unusable, keeping the first cause.
func (s *ValidatedSession) quarantine(cause error) {
	s.mu.Lock()
	first := s.broken == nil && !s.closed
	if first {
		s.broken = cause
	}
	s.mu.Unlock()
	if first {
		code := CodeOf(cause)
		if code == "" {
			code = CodeSessionUnusable
		}
		s.v.emit(s.id, TypeQuarantined, &Problem{Provider: s.v.caps.ProviderKey, Code: string(code), Error: cause.Error()})
	}
}

// isClosing is read for every output, so it is an atomic mirror of
// closing || closed, written under mu.
func (s *ValidatedSession) isClosing() bool { return s.ending.Load() }

// RunTurn starts a turn and yields its outputs as they are pulled. A
// refusal is the only pair yielded: an error and a zero Output. The turn
// ends at turn.completed or at one request, which is then pending until
// Resolve or Interrupt. An error mid-turn (the provider failed, broke the
// contract, or the session was closed) ends the sequence; the session is
// then unusable (or closed). A host that stops pulling before the end
// makes the session unusable too.
func (s *ValidatedSession) RunTurn(ctx context.Context, req TurnRequest) iter.Seq2[Output, error] {
	return func(yield func(Output, error) bool) {
		if err := s.beginTurn(req); err != nil {
			yield(Output{}, err)
			return
		}
		preq := TurnRequest{TurnID: req.TurnID, Input: req.Input, Context: req.Context, Limit: req.Limit}
		s.drive(req.TurnID, "turn", false, func() iter.Seq2[Output, error] { return s.inner.RunTurn(ctx, preq) }, yield)
	}
}

func (s *ValidatedSession) beginTurn(req TurnRequest) error {
	key := s.v.caps.ProviderKey
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	switch {
	case s.phase == running || s.busy > 0:
		return violation(key, CodeConcurrentTurn, "a turn is already active")
	case s.phase == waiting:
		return violation(key, CodeRequestPending, "the active turn waits for a request to be resolved")
	}
	if err := CheckID(req.TurnID); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidInput, Message: "the turn id is malformed", Err: err}
	}
	if s.turns.has(req.TurnID) {
		return violation(key, CodeInvalidInput, "the turn id was already used in this session")
	}
	if n := len(req.Input) + len(req.Context); n > s.v.caps.Limits.MaxInputBytes {
		return violation(key, CodeInvalidInput, "the input and its context are %d bytes; the provider accepts at most %d", n, s.v.caps.Limits.MaxInputBytes)
	}
	s.turns.add(req.TurnID)
	s.phase, s.turnID, s.pending = running, req.TurnID, nil
	return nil
}

// Resolve answers the pending request and yields the rest of the turn.
func (s *ValidatedSession) Resolve(ctx context.Context, res Resolution) iter.Seq2[Output, error] {
	return func(yield func(Output, error) bool) {
		if err := s.beginResolve(res); err != nil {
			yield(Output{}, err)
			return
		}
		pres := res
		pres.Response = clone(res.Response)
		s.drive(res.TurnID, "resolve", true, func() iter.Seq2[Output, error] { return s.inner.Resolve(ctx, pres) }, yield)
	}
}

func (s *ValidatedSession) beginResolve(res Resolution) error {
	key := s.v.caps.ProviderKey
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	mismatch := func(format string, args ...any) error {
		return violation(key, CodeRequestResolutionMismatch, format, args...)
	}
	switch {
	case s.phase != waiting || s.busy > 0:
		return mismatch("no request is pending")
	case res.TurnID != s.turnID:
		return mismatch("the resolution names a turn that is not active")
	case res.RequestID != s.pending.ID:
		return mismatch("the resolution names a request that is not pending")
	case len(res.Note) > s.v.caps.Limits.MaxInputBytes:
		return violation(key, CodeInvalidInput, "the note is %d bytes; the provider accepts at most %d", len(res.Note), s.v.caps.Limits.MaxInputBytes)
	}
	hasResponse := len(res.Response) > 0
	switch {
	case s.pending.Kind == RequestApproval && hasResponse:
		return mismatch("an approval takes no response")
	case s.pending.Kind == RequestElicitation && !res.Approve && hasResponse:
		return mismatch("a declined elicitation takes no response")
	case s.pending.Kind == RequestElicitation && res.Approve:
		if !hasResponse {
			return mismatch("an accepted elicitation needs a response")
		}
		if len(res.Response) > s.v.caps.Limits.MaxInputBytes {
			return violation(key, CodeInvalidInput, "the response is %d bytes; the provider accepts at most %d", len(res.Response), s.v.caps.Limits.MaxInputBytes)
		}
		if err := checkJSONObject(res.Response, "the response"); err != nil {
			return &ContractError{Provider: key, Code: CodeRequestResolutionMismatch, Message: "the elicitation response is unusable", Err: err}
		}
	}
	s.phase = running
	return nil
}

// notStarted marks a provider failure that left the session as it was.
type notStarted struct{ err error }

func (n notStarted) Error() string { return n.err.Error() }

var errClosedMidTurn = errors.New("closed mid-turn")

// pull is the state of one drive: what the outputs so far have shown.
// It is one allocation, where separate variables captured by the loop
// body would each be one.
type pull struct {
	started, produced, abandoned, inHost bool
	holding                              bool   // held is the turn's last output
	held                                 Output // turn.completed or a request
	fail                                 error
}

// drive pulls a provider's outputs through the checks and on to the host.
func (s *ValidatedSession) drive(turnID, op string, continuation bool, open func() iter.Seq2[Output, error], yield func(Output, error) bool) {
	key := s.v.caps.ProviderKey
	st := &pull{started: continuation}

	func() {
		defer func() {
			if r := recover(); r != nil {
				if st.inHost {
					// The host's own loop body panicked: the turn was
					// abandoned mid-way. The panic is the host's.
					s.quarantine(errors.New("the host's loop body panicked before the turn reached a stable boundary"))
					panic(r)
				}
				if st.fail != nil {
					// The provider went on after being told to stop; the
					// first problem is the one to report.
					return
				}
				st.fail = &OperationError{Provider: key, Op: op, Started: true, Err: &PanicError{Where: "the provider's " + op, Value: r}}
			}
		}()
		seq := open()
		if seq == nil {
			st.fail = violation(key, CodeInvalidTurnSequence, "the provider's %s returned no output sequence", op)
			return
		}
		for out, err := range seq {
			if s.isClosing() {
				st.fail = errClosedMidTurn
				return
			}
			if err != nil {
				if !st.produced && errors.Is(err, ErrNotStarted) {
					st.fail = notStarted{err}
				} else {
					st.fail = &OperationError{Provider: key, Op: op, Started: true, Err: err}
				}
				return
			}
			st.produced = true
			if st.holding {
				st.fail = violation(key, CodeInvalidTurnSequence, "an output followed %s", st.held.Kind)
				return
			}
			if err := s.checkOutput(out, turnID, &st.started); err != nil {
				st.fail = err
				return
			}
			if out.Kind == OutputRequest || out.Kind == OutputTurnCompleted {
				st.held, st.holding = out, true
				if out.Request != nil {
					r := *out.Request
					r.Schema, r.Args = clone(r.Schema), clone(r.Args)
					r.Choices = slices.Clone(r.Choices)
					st.held.Request = &r
				}
				continue
			}
			st.inHost = true
			ok := yield(out, nil)
			st.inHost = false
			if !ok {
				st.abandoned = true
				return
			}
		}
	}()

	if s.isClosing() && !st.abandoned {
		st.fail = errClosedMidTurn
	}
	ns, notStartedFail := st.fail.(notStarted)
	switch {
	case st.abandoned:
		s.quarantine(errors.New("the host stopped pulling a turn before it reached a stable boundary"))
	case st.fail == errClosedMidTurn:
		yield(Output{}, violation(key, CodeSessionClosed, "the session was closed during the turn"))
	case notStartedFail:
		s.mu.Lock()
		if continuation {
			s.phase = waiting
		} else {
			s.phase, s.turnID = idle, ""
			s.turns.remove(turnID)
		}
		s.mu.Unlock()
		yield(Output{}, &OperationError{Provider: key, Op: op, Started: false, Err: ns.err})
	case st.fail != nil:
		s.quarantine(st.fail)
		yield(Output{}, st.fail)
	case !st.holding:
		err := violation(key, CodeInvalidTurnSequence, "the outputs ended before turn.completed or a request")
		s.quarantine(err)
		yield(Output{}, err)
	case st.held.Kind == OutputTurnCompleted:
		s.mu.Lock()
		start := s.turnStart
		s.phase, s.turnID, s.pending = idle, "", nil
		s.mu.Unlock()
		if s.v.emitting() {
			s.v.emit(s.id, TypeTurnEnd, &TurnEvent{Provider: key, TurnID: turnID, Outcome: string(st.held.Outcome), DurationMs: event.Ms(time.Since(start))})
		}
		yield(st.held, nil)
	default:
		s.mu.Lock()
		s.phase, s.pending = waiting, st.held.Request
		s.mu.Unlock()
		if s.v.emitting() {
			s.v.emit(s.id, TypeRequest, &RequestEvent{Provider: key, TurnID: turnID, RequestID: st.held.Request.ID, Kind: string(st.held.Request.Kind)})
		}
		yield(st.held, nil)
	}
}

// checkOutput checks one output against the session, the turn, the
// sequence so far and the capabilities.
func (s *ValidatedSession) checkOutput(out Output, turnID string, started *bool) error {
	key := s.v.caps.ProviderKey
	if out.SessionID != s.id {
		return violation(key, CodeOutputSessionMismatch, "an output names another session")
	}
	if out.TurnID != turnID {
		return violation(key, CodeOutputTurnMismatch, "an output names another turn")
	}
	switch out.Kind {
	case OutputTurnStarted:
		if *started {
			return violation(key, CodeInvalidTurnSequence, "turn.started came after the turn had started")
		}
		*started = true
		if s.v.emitting() { // the start is only for turn_end's duration
			now := time.Now()
			s.mu.Lock()
			s.turnStart = now
			s.mu.Unlock()
		}
		if s.v.emitting() {
			s.v.emit(s.id, TypeTurnStart, &TurnEvent{Provider: key, TurnID: turnID})
		}
		return nil
	case OutputText, OutputActivity, OutputRequest, OutputTurnCompleted, OutputUsage:
		if !*started {
			return violation(key, CodeInvalidTurnSequence, "the first output was %s, not turn.started", out.Kind)
		}
	default:
		return violation(key, CodeOutputCapabilityMismatch, "an output has an unknown kind")
	}
	switch out.Kind {
	case OutputUsage:
		if out.Usage == nil {
			return violation(key, CodeInvalidOperationResult, "a usage output carries no usage")
		}
	case OutputRequest:
		r := out.Request
		if r == nil {
			return violation(key, CodeInvalidOperationResult, "a request output carries no request")
		}
		if err := s.checkRequest(r); err != nil {
			return err
		}
		s.mu.Lock()
		reused := s.requests.has(r.ID)
		s.requests.add(r.ID)
		s.mu.Unlock()
		if reused {
			return violation(key, CodeInvalidTurnSequence, "a request id was used before in this session")
		}
	case OutputTurnCompleted:
		switch out.Outcome {
		case OutcomeCompleted, OutcomeInterrupted, OutcomeFailed:
		default:
			return violation(key, CodeInvalidOperationResult, "turn.completed has an unknown outcome")
		}
	}
	return nil
}

// checkRequest checks a request against the capabilities.
func (s *ValidatedSession) checkRequest(r *Request) *ContractError {
	key, caps := s.v.caps.ProviderKey, s.v.caps
	switch {
	case r.Kind == RequestApproval && !caps.Requests.Approval,
		r.Kind == RequestElicitation && !caps.Requests.Elicitation:
		return violation(key, CodeOutputCapabilityMismatch, "the provider raised an %s request it does not declare", r.Kind)
	case r.Kind != RequestApproval && r.Kind != RequestElicitation:
		return violation(key, CodeOutputCapabilityMismatch, "a request has an unknown kind")
	}
	if err := CheckID(r.ID); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidOperationResult, Message: "a request id is malformed", Err: err}
	}
	if len(r.Schema) > 0 {
		if err := checkJSONObject(r.Schema, "the request schema"); err != nil {
			return &ContractError{Provider: key, Code: CodeInvalidOperationResult, Message: "a request schema is unusable", Err: err}
		}
	}
	return nil
}

// Interrupt ends the named running or waiting turn. A failure after the
// provider started makes the session unusable.
func (s *ValidatedSession) Interrupt(ctx context.Context, turnID string) error {
	key := s.v.caps.ProviderKey
	if s.interrupter == nil {
		return violation(key, CodeInputCapabilityMismatch, "the provider does not declare interrupt")
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.phase == idle || turnID != s.turnID {
		s.mu.Unlock()
		return violation(key, CodeActiveTurnMismatch, "the turn to interrupt is not active")
	}
	wasWaiting := s.phase == waiting
	if wasWaiting {
		s.phase = running // refuse Resolve and new turns while the interrupt runs
	}
	s.busy++
	s.mu.Unlock()

	err := safely("the provider's interrupt", func() error { return s.interrupter.Interrupt(ctx, turnID) })

	s.mu.Lock()
	s.busy--
	ours := wasWaiting && s.phase == running && s.turnID == turnID
	if err != nil && errors.Is(err, ErrNotStarted) {
		if ours {
			s.phase = waiting
		}
		s.mu.Unlock()
		return &OperationError{Provider: key, Op: "interrupt", Started: false, Err: err}
	}
	var took time.Duration
	if err == nil && ours {
		took = time.Since(s.turnStart)
		s.phase, s.turnID, s.pending = idle, "", nil
	}
	s.mu.Unlock()
	if err != nil {
		oe := &OperationError{Provider: key, Op: "interrupt", Started: true, Err: err}
		s.quarantine(oe)
		return oe
	}
	if ours {
		s.v.emit(s.id, TypeTurnEnd, &TurnEvent{Provider: key, TurnID: turnID, Outcome: string(OutcomeInterrupted), DurationMs: event.Ms(took)})
	}
	return nil
}

// Steer adds input to the named running turn. A failure after the
// provider started makes the session unusable.
func (s *ValidatedSession) Steer(ctx context.Context, req SteerRequest) error {
	key := s.v.caps.ProviderKey
	if s.steerer == nil {
		return violation(key, CodeInputCapabilityMismatch, "the provider does not declare steer")
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	switch {
	case s.phase == waiting && req.TurnID == s.turnID:
		s.mu.Unlock()
		return violation(key, CodeRequestPending, "the turn waits for a request to be resolved")
	case s.phase != running || req.TurnID != s.turnID:
		s.mu.Unlock()
		return violation(key, CodeActiveTurnMismatch, "the turn to steer is not running")
	case len(req.Input) > s.v.caps.Limits.MaxInputBytes:
		s.mu.Unlock()
		return violation(key, CodeInvalidInput, "the input is %d bytes; the provider accepts at most %d", len(req.Input), s.v.caps.Limits.MaxInputBytes)
	}
	s.busy++
	s.mu.Unlock()

	err := safely("the provider's steer", func() error { return s.steerer.Steer(ctx, req) })

	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotStarted) {
		return &OperationError{Provider: key, Op: "steer", Started: false, Err: err}
	}
	oe := &OperationError{Provider: key, Op: "steer", Started: true, Err: err}
	s.quarantine(oe)
	return oe
}

// Close closes the session: it stops the host binding's invocations,
// closes the provider's session, and releases the binding. It is
// idempotent; concurrent calls share one attempt. When cleanup fails the
// session is unusable and the error is a *CleanupError (a
// *HostBindingCleanupError when only the binding's release failed): call
// Close again or RetryCleanup to finish. An empty reason is
// CloseRequested.
func (s *ValidatedSession) Close(ctx context.Context, reason CloseReason) error {
	if reason == "" {
		reason = CloseRequested
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.reason == "" {
		s.reason = reason
	}
	s.mu.Unlock()
	err := s.cleanup.do(ctx)
	if err == nil {
		return nil
	}
	s.mu.Lock()
	providerClosed := s.providerClosed
	s.mu.Unlock()
	ce := CleanupError{Provider: s.v.caps.ProviderKey, Errs: flatten(err), retry: &s.cleanup}
	if providerClosed {
		return &HostBindingCleanupError{ce}
	}
	return &ce
}

func (s *ValidatedSession) doClose(ctx context.Context) error {
	key := s.v.caps.ProviderKey
	s.mu.Lock()
	s.closing = true
	s.ending.Store(true)
	reason := s.reason
	if reason == "" {
		reason = CloseRequested
		s.reason = reason
	}
	providerClosed := s.providerClosed
	s.mu.Unlock()

	var errs errList
	s.interacts.end()
	if s.lease != nil {
		s.lease.halt()
	}
	if !providerClosed {
		if err := safely("the provider's close", func() error { return s.inner.Close(ctx, reason) }); err != nil {
			errs = append(errs, &OperationError{Provider: key, Op: "close", Started: true, Err: err})
		} else {
			s.mu.Lock()
			s.providerClosed = true
			s.mu.Unlock()
		}
	}
	if s.lease != nil {
		if err := s.lease.release.do(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		s.mu.Lock()
		s.closing = false
		s.ending.Store(false)
		if s.broken == nil {
			s.broken = errs
		}
		s.mu.Unlock()
		s.v.emitProblem(s.id, CodeSessionUnusable, errs)
		return errs
	}
	s.mu.Lock()
	s.closing, s.closed = false, true
	s.mu.Unlock()
	if s.v.emitting() {
		s.v.emit(s.id, TypeSessionClosed, &SessionEvent{Provider: key, Instance: s.v.opt.instance, Reason: string(reason)})
	}
	return nil
}

// emitting reports whether the wrapper's events go anywhere, so a payload
// nobody reads is never built.
func (v *Validated) emitting() bool { return v.opt.events != nil }

func (v *Validated) emit(sessionID string, typ event.Type, payload any) {
	if v.opt.events == nil {
		return
	}
	fn := v.opt.events
	_ = safely("the event hook", func() error {
		fn(event.Event{Type: typ, Payload: payload, Meta: event.Meta{SessionID: sessionID}})
		return nil
	})
}

func (v *Validated) emitProblem(sessionID string, code Code, err error) {
	v.emit(sessionID, TypeCleanupFailed, &Problem{Provider: v.caps.ProviderKey, Code: string(code), Error: err.Error()})
}

// idSet is the set of ids a session has used. Most sessions use a few, so
// they are kept in a slice; past smallIDSet they move to a map.
type idSet struct {
	few  []string
	many map[string]struct{}
}

const smallIDSet = 16

func (s *idSet) has(id string) bool {
	if s.many != nil {
		_, ok := s.many[id]
		return ok
	}
	for _, x := range s.few {
		if x == id {
			return true
		}
	}
	return false
}

func (s *idSet) add(id string) {
	switch {
	case s.many != nil:
		s.many[id] = struct{}{}
	case len(s.few) < smallIDSet:
		s.few = append(s.few, id)
	default:
		s.many = make(map[string]struct{}, 2*smallIDSet)
		for _, x := range s.few {
			s.many[x] = struct{}{}
		}
		s.many[id] = struct{}{}
		s.few = nil
	}
}

func (s *idSet) remove(id string) {
	if s.many != nil {
		delete(s.many, id)
		return
	}
	for i, x := range s.few {
		if x == id {
			s.few = append(s.few[:i], s.few[i+1:]...)
			return
		}
	}
}
