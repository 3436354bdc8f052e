package native

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Why a turn's context was cancelled by the session rather than by the
// host.
var (
	errInterrupted = errors.New("native: the turn was interrupted")
	errClosing     = errors.New("native: the session is closing")
	errAbandoned   = errors.New("native: the host stopped pulling the turn's outputs")
)

// session is one conversation bound to a session id. The validated
// wrapper serialises turns; the mutex guards what Interrupt, Close and the
// agent's events touch while a turn runs.
type session struct {
	in       *instance
	id       string
	binding  provider.Binding
	identity *tool.Identity
	tools    []tool.Tool  // the host binding's tools: this session's runs only
	context  *llm.Message // the host binding's instructions, placed as context

	mu     sync.Mutex
	record Record
	active *turn
	// pending is the paused run a request waits on.
	pending *PendingTurn
	// interruptNext is a turn interrupted before its run began.
	interruptNext string
	// interruptedWaiting is the last waiting turn an interrupt ended.
	interruptedWaiting string
	closing            bool
	// unsaved: a close gave up the waiting turn and has not stored that
	// yet; a retried Close stores it.
	unsaved bool
}

var (
	_ provider.Session     = (*session)(nil)
	_ provider.Interrupter = (*session)(nil)
	_ provider.Pender      = (*session)(nil)
	_ provider.Workspacer  = (*session)(nil)
)

// Workspace is the directory of the conversation's interpreter (its
// /work): the agent's tool that keeps files for the conversation, its
// session started when none is live.
func (s *session) Workspace(ctx context.Context) (string, error) {
	dir, err := s.in.agent.Workspace(ctx, s.id, s.identity)
	if errors.Is(err, tool.ErrNoWorkspace) {
		return "", fmt.Errorf("%w: %w", provider.ErrNoWorkspace, err)
	}
	return dir, err
}

// Pending reports the turn a resumed conversation was waiting on (the
// pause its record keeps) as the approval request it raised.
func (s *session) Pending() (string, provider.Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return "", provider.Request{}, false
	}
	return s.pending.TurnID, s.pending.request(), true
}

// turn is one run of the agent (a Run, or a ResumeWith continuing one).
// The run executes inside the host's pull: on the goroutine that ranges
// over the turn's outputs, and each of the agent's progress events is
// handed to the host's yield as it happens, so the agent is never ahead
// of what the host has taken. Tool calls that run concurrently report
// from their own goroutines; yielding is serialised.
type turn struct {
	s            *session
	id           string
	continuation bool
	// ctx is the host's: the run is stopped through agent.CancelRun, so
	// the turn needs no cancellable context of its own.
	ctx   context.Context
	yield func(provider.Output, error) bool
	// input is what a turn runs; resume and decision what a
	// continuation does instead.
	input    agent.Input
	conv     agent.Conversation // input.Conversation points here
	resume   *PendingTurn
	decision agent.Decision
	limit    func(llm.TurnUsage) string // the host's budget for a continuation
	started  atomic.Bool                // the agent began the turn (turn_start)

	// yielding serialises calls of yield; it is held while the host has
	// an output in its hands, so nothing else takes it.
	yielding sync.Mutex

	mu       sync.Mutex
	runID    string
	cause    error        // why the session stopped the run, if it did
	streamed map[int]bool // iterations whose text arrived as deltas
	parked   bool         // an output is in the host's hands
	stopped  bool         // no more outputs: the host stopped pulling, or the session closes
	// abandoned: the host's yield returned false (or panicked).
	abandoned bool
	hostPanic any
	// closeAfter is set when Close found the run parked in the host's
	// hands: the run's own goroutine tears the session down when it ends.
	closeAfter provider.CloseReason
	ended      bool          // the run has returned
	endedCh    chan struct{} // made for a Close that waits; closed when the run returns

	res agent.Result
	err error
}

func (s *session) Binding() provider.Binding { return s.binding }

func notStarted(format string, args ...any) error {
	return fmt.Errorf("%w: native: "+format, append([]any{provider.ErrNotStarted}, args...)...)
}

// newTurnLocked makes t the active turn.
func (s *session) newTurnLocked(ctx context.Context, id string, continuation bool, runID string, yield func(provider.Output, error) bool) *turn {
	t := &turn{s: s, id: id, continuation: continuation, ctx: ctx, runID: runID, yield: yield}
	if s.interruptNext == id {
		s.interruptNext = ""
		t.cause = errInterrupted // the run is cancelled as it begins
	}
	s.active = t
	return t
}

// conversationLocked is the conversation a run continues: the stored one,
// after the binding's instructions when there are some. The agent copies
// what it is given, so the stored messages are passed as they are.
func (s *session) conversationLocked() agent.Conversation {
	c := s.record.Conversation
	if s.context != nil {
		msgs := make([]llm.Message, 0, len(c.Messages)+1)
		msgs = append(msgs, *s.context)
		c.Messages = append(msgs, c.Messages...)
	}
	return c
}

// strip removes the instructions conversationLocked placed first: they
// belong to the host binding, not to the stored conversation.
func (s *session) strip(c agent.Conversation) agent.Conversation {
	if s.context != nil && len(c.Messages) > 0 {
		m := c.Messages[0]
		if m.Role == s.context.Role && m.Content == s.context.Content && len(m.ToolCalls) == 0 && m.ToolCallID == "" {
			c.Messages = c.Messages[1:]
		}
	}
	return c
}

func (s *session) RunTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		s.mu.Lock()
		switch {
		case s.closing:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("the session is closing"))
			return
		case s.active != nil || s.pending != nil:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("a turn is active in this session"))
			return
		}
		t := s.newTurnLocked(ctx, req.TurnID, false, "", yield)
		t.conv = s.conversationLocked()
		if req.Context != "" {
			// The host's note goes before the person's words, as a message
			// of its own, and stays in the conversation like the rest.
			t.conv.Messages = append(slices.Clip(t.conv.Messages), llm.Message{Role: llm.RoleUser, Content: req.Context})
		}
		t.input = agent.Input{Message: req.Input, SessionID: s.id, Identity: s.identity, // the agent keeps its own copy
			Conversation: &t.conv, Tools: s.tools, Progress: t.observe, Limit: req.Limit}
		if s.in.turnRunIDs {
			t.input.RunID = req.TurnID
		}
		s.mu.Unlock()
		t.run()
		s.finish(t, nil)
	}
}

func (s *session) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		s.mu.Lock()
		p := s.pending
		switch {
		case s.closing:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("the session is closing"))
			return
		case p == nil && res.TurnID != "" && s.interruptedWaiting == res.TurnID:
			// An interrupt ended the waiting turn just before this
			// resolution reached it: the turn is over, interrupted.
			s.mu.Unlock()
			yield(s.output(provider.OutputTurnCompleted, res.TurnID, func(o *provider.Output) { o.Outcome = provider.OutcomeInterrupted }), nil)
			return
		case p == nil || p.TurnID != res.TurnID || p.Checkpoint.ID != res.RequestID:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("no request with that id is pending in this turn"))
			return
		}
		// The stored pause goes before the run continues: a process that
		// dies mid-way loses the pause rather than answering it twice.
		s.pending, s.record.Pending = nil, nil
		t := s.newTurnLocked(ctx, res.TurnID, true, p.Checkpoint.RunID, yield)
		t.resume, t.decision, t.limit = p, agent.Decision{Approve: res.Approve, Note: res.Note}, res.Limit
		rec := s.record.view()
		s.mu.Unlock()
		if err := s.in.save(detached(ctx), s.binding, rec); err != nil {
			s.mu.Lock()
			if s.active == t {
				s.active = nil
			}
			if !s.closing {
				s.pending, s.record.Pending = p, p
			}
			s.mu.Unlock()
			t.end() // a Close waiting for the turn goes on
			yield(provider.Output{}, notStarted("saving the conversation before answering its pause: %v", err))
			return
		}
		t.run()
		s.finish(t, p)
	}
}

// run runs the agent's side of the turn (a Run, or a ResumeWith for a
// continuation) on the caller's goroutine: the host's pull. A panic of
// the agent is its error.
func (t *turn) run() {
	defer func() {
		if v := recover(); v != nil {
			t.res, t.err = agent.Result{}, &provider.PanicError{Where: "the agent", Value: v}
		}
	}()
	a := t.s.in.agent
	if p := t.resume; p != nil {
		t.res, t.err = a.ResumeWith(t.ctx, p.Checkpoint, t.decision, agent.ResumeOptions{Tools: t.s.tools, SessionID: t.s.id, Progress: t.observe, Limit: t.limit})
		return
	}
	t.res, t.err = a.Run(t.ctx, t.input)
}

// end marks the turn over (the run returned and the session settled),
// waking a Close that waits for it. Only the first call counts.
func (t *turn) end() {
	t.mu.Lock()
	if !t.ended {
		t.ended = true
		if t.endedCh != nil {
			close(t.endedCh)
		}
	}
	t.mu.Unlock()
}

// detached is ctx without its cancellation: for what must finish after
// the turn's context is done (a save, a teardown).
func detached(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// returned is closed once the run has returned.
func (t *turn) returned() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return closedChan
	}
	if t.endedCh == nil {
		t.endedCh = make(chan struct{})
	}
	return t.endedCh
}

// cancel stops the run with cause (the first cause stands). A run whose
// id is not known yet is cancelled as it begins (see observe).
func (t *turn) cancel(cause error) {
	t.mu.Lock()
	if t.cause == nil {
		t.cause = cause
	}
	runID := t.runID
	t.mu.Unlock()
	if runID != "" {
		t.s.in.agent.CancelRun(runID, cause)
	}
}

// stoppedBy reports why the session stopped the run, or nil.
func (t *turn) stoppedBy() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cause
}

// stopForClose stops the run for Close. When the run is parked in the
// host's hands, the teardown is left to the run: it closes the session
// (reason r) once it has returned, and stopForClose returns true.
func (t *turn) stopForClose(r provider.CloseReason) (deferred bool) {
	t.cancel(errClosing)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.parked {
		t.closeAfter = r
	}
	return t.parked
}

// deliver hands one output to the host, unless the turn takes no more.
func (t *turn) deliver(o provider.Output) {
	t.yielding.Lock()
	defer t.yielding.Unlock()
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	t.parked = true
	t.mu.Unlock()

	ok, panicked := t.hand(o)

	t.mu.Lock()
	t.parked = false
	if !ok {
		t.stopped, t.abandoned = true, true
		if panicked != nil {
			t.hostPanic = panicked
		}
	}
	t.mu.Unlock()
	if !ok {
		t.cancel(errAbandoned)
	}
}

// hand calls the host's yield, catching a panic of the host's: it is
// raised again on the pulling goroutine once the run has stopped.
func (t *turn) hand(o provider.Output) (ok bool, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			ok, panicked = false, v
		}
	}()
	return t.yield(o, nil), nil
}

// finish ends the turn once its run has returned: the last outputs (or
// the error), a teardown Close left to the run, and a panic of the
// host's raised again. p is the request a continuation answers.
func (s *session) finish(t *turn, p *PendingTurn) {
	// A Close waits for the turn until the session is settled (the pause
	// stored, the conversation saved), not just until the run returns.
	defer t.end()
	t.mu.Lock()
	abandoned, hostPanic, closeAfter := t.abandoned, t.hostPanic, t.closeAfter
	t.mu.Unlock()
	var outs []provider.Output
	var err error
	if abandoned {
		s.abandon(t)
	} else {
		outs, err = s.conclude(t, p)
		if t.started.Load() {
			// What the turn used goes first: also a turn that failed or
			// was cancelled says so before its error.
			u := t.res.Usage
			u.Basis = llm.BasisCounted
			o := s.output(provider.OutputUsage, t.id, nil)
			o.Usage = &u
			outs = append([]provider.Output{o}, outs...)
		}
	}
	if closeAfter != "" {
		// Close found the run in the host's hands and left the teardown
		// to it: nothing more is handed over.
		// (Close has returned: a failure to settle a pause here leaves the
		// stored record as the turn left it, which a resume reads.)
		ctx := detached(t.ctx)
		_ = s.settlePause(ctx, closeAfter)
		s.teardown(ctx, closeAfter)
		t.end()
	} else {
		t.end()
		if !abandoned {
			for _, o := range outs {
				if !t.yield(o, nil) {
					break
				}
			}
			if err != nil {
				t.yield(provider.Output{}, err)
			}
		}
	}
	if hostPanic != nil {
		panic(hostPanic)
	}
}

// abandon ends a turn the host stopped pulling: the run has been
// cancelled and has returned; a pause it reached is given up.
func (s *session) abandon(t *turn) {
	s.mu.Lock()
	if s.active == t {
		s.active = nil
	}
	s.mu.Unlock()
	if t.err == nil && t.res.Paused != nil {
		_, _ = s.in.agent.AbandonCheckpoint(detached(t.ctx), t.res.Paused.Checkpoint)
	}
}

// conclude maps how the run ended to the turn's last outputs, or to an
// error, and updates the session.
func (s *session) conclude(t *turn, p *PendingTurn) ([]provider.Output, error) {
	res, err := t.res, t.err
	cause := t.stoppedBy()
	interrupted := errors.Is(cause, errInterrupted)

	s.mu.Lock()
	if s.active == t {
		s.active = nil
	}
	if !t.started.Load() {
		// The agent refused before the turn began (a busy or shut-down
		// agent, an empty message, a spent checkpoint): nothing happened.
		restore := p != nil && !s.closing
		if restore {
			s.pending, s.record.Pending = p, p
		}
		rec := s.record.view()
		s.mu.Unlock()
		if err == nil {
			err = errors.New("native: the agent returned without starting the turn")
		}
		if restore {
			// The pause still waits: store it again.
			if serr := s.in.save(detached(t.ctx), s.binding, rec); serr != nil {
				err = errors.Join(err, fmt.Errorf("native: storing the pause again: %w", serr))
			}
		}
		return nil, fmt.Errorf("%w: %w", provider.ErrNotStarted, err)
	}
	completed := func(outcome provider.Outcome) provider.Output {
		return s.output(provider.OutputTurnCompleted, t.id, func(o *provider.Output) { o.Outcome = outcome })
	}

	var outs []provider.Output
	switch {
	case err == nil && res.Paused != nil && !interrupted:
		pt := &PendingTurn{TurnID: t.id, Question: res.Paused.Question, Tool: res.Paused.ToolName, Checkpoint: res.Paused.Checkpoint}
		s.pending, s.record.Pending = pt, pt
		rec := s.record.view()
		s.mu.Unlock()
		// Stored, so the pause survives the session: a resume comes back
		// waiting on it.
		if err := s.in.save(detached(t.ctx), s.binding, rec); err != nil {
			return nil, fmt.Errorf("native: saving the paused turn: %w", err)
		}
		r := pt.request()
		o := s.output(provider.OutputRequest, t.id, nil)
		o.Request = &r
		return []provider.Output{o}, nil
	case err == nil && res.Paused != nil:
		// Interrupted as it paused: the turn ends here, and so does the
		// pause.
		s.mu.Unlock()
		if _, aerr := s.in.agent.AbandonCheckpoint(detached(t.ctx), res.Paused.Checkpoint); aerr != nil {
			return nil, fmt.Errorf("native: giving up the pause of an interrupted turn: %w", aerr)
		}
		s.mu.Lock()
		outs = []provider.Output{completed(provider.OutcomeInterrupted)}
	case err == nil:
		s.record.Conversation = s.strip(*res.Conversation)
		outs = []provider.Output{completed(provider.OutcomeCompleted)}
	case interrupted:
		outs = []provider.Output{completed(provider.OutcomeInterrupted)}
	case errors.Is(err, agent.ErrShutdown), cause != nil, t.ctx.Err() != nil, errors.As(err, new(*provider.PanicError)),
		errors.Is(err, toolsession.ErrCapacity):
		// A capacity refusal goes to the host as it is, so it can answer
		// "busy, retry" (429) rather than "failed"; nothing was started.
		// Cancelled by the host's context, by Close, or by the agent's
		// shutdown; or the agent panicked (a model that panics, say), so
		// what the run held cannot be vouched for: the turn did not reach
		// a boundary.
		s.mu.Unlock()
		return nil, err
	default:
		// The model failed, or the run reached its iteration limit: the
		// turn is over and the conversation is as it was before it. The
		// error itself is the agent's agentry.error.fatal event.
		outs = []provider.Output{
			s.output(provider.OutputActivity, t.id, func(o *provider.Output) { o.Text = "the turn failed: " + failureClass(err) }),
			completed(provider.OutcomeFailed),
		}
	}
	s.markLocked(t.id)
	rec := s.record.view()
	s.mu.Unlock()
	if err := s.in.save(detached(t.ctx), s.binding, rec); err != nil {
		return nil, fmt.Errorf("native: saving the conversation after the turn: %w", err)
	}
	return outs, nil
}

// markLocked records that turn id ended with the conversation as it is.
func (s *session) markLocked(id string) {
	s.record.Turns = append(s.record.Turns, TurnMark{ID: id, Messages: len(s.record.Conversation.Messages)})
}

func failureClass(err error) string {
	if errors.Is(err, agent.ErrMaxIterations) {
		return "the agent reached its iteration limit without an answer"
	}
	return "the model failed"
}

func (s *session) output(kind provider.OutputKind, turnID string, set func(*provider.Output)) provider.Output {
	o := provider.Output{Kind: kind, SessionID: s.id, TurnID: turnID}
	if set != nil {
		set(&o)
	}
	return o
}

// observe maps an event of the turn's run to an output and waits until
// the host takes it (or nobody will).
func (t *turn) observe(e event.Event) {
	t.mu.Lock()
	if t.runID == "" {
		t.runID = e.Meta.RunID
	}
	var o provider.Output
	switch p := e.Payload.(type) {
	case *event.TurnStart:
		t.started.Store(true)
		if cause := t.cause; cause != nil {
			// Stopped before the run began: stop it now.
			runID := t.runID
			t.mu.Unlock()
			t.s.in.agent.CancelRun(runID, cause)
			t.mu.Lock()
		}
		if t.continuation {
			t.mu.Unlock()
			return
		}
		o = t.output(provider.OutputTurnStarted, "")
	case *event.LLMDelta:
		if t.streamed == nil {
			t.streamed = map[int]bool{}
		}
		t.streamed[p.Iteration] = true
		if p.Text == "" {
			t.mu.Unlock()
			return
		}
		o = t.output(provider.OutputText, p.Text)
	case *event.LLMMessage:
		if p.Role != string(llm.RoleAssistant) || p.Content == "" || t.streamed[p.Iteration] {
			t.mu.Unlock()
			return
		}
		o = t.output(provider.OutputText, p.Content)
	case *tool.CallStart:
		o = t.output(provider.OutputActivity, t.s.in.phrases.Calling(p.Tool))
		o.Call = &provider.CallDetail{ID: p.ToolCallID, Tool: p.Tool, Input: p.Args}
	case *tool.CallEnd:
		o = t.output(provider.OutputActivity, t.s.in.phrases.Ended(p))
		o.Call = &provider.CallDetail{ID: p.ToolCallID, Tool: p.Tool, Output: p.Content, Ended: true, IsError: p.IsError}
	default:
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	if !t.started.Load() {
		return // nothing precedes turn.started
	}
	t.deliver(o)
}

// output is one of the turn's outputs.
func (t *turn) output(kind provider.OutputKind, text string) provider.Output {
	return provider.Output{Kind: kind, SessionID: t.s.id, TurnID: t.id, Text: text}
}

// toolPhrases are the activity texts of one tool, made once: a turn
// reports every call it makes.
type toolPhrases struct{ calling, returned, failed, declined string }

// Phrasebook keeps the activity texts (provider.OutputActivity) of the
// tools an instance's sessions call: the agent's own and the host
// bindings' (bounded: past 4096 tools, phrases are made per call). Every
// provider built on agentry's turn loop says the same things with it. The
// zero value is ready; it is safe for concurrent use.
type Phrasebook struct {
	m sync.Map // tool name → *toolPhrases
	n atomic.Int32
}

const maxPhrases = 4096 // past this, phrases are made per call

func (b *Phrasebook) of(name string) *toolPhrases {
	if p, ok := b.m.Load(name); ok {
		return p.(*toolPhrases)
	}
	p := &toolPhrases{calling: "calling " + name, returned: name + " returned",
		failed: name + " returned an error", declined: name + " was declined"}
	if b.n.Load() < maxPhrases {
		if _, loaded := b.m.LoadOrStore(name, p); !loaded {
			b.n.Add(1)
		}
	}
	return p
}

// Calling is the text of a tool call that starts.
func (b *Phrasebook) Calling(tool string) string { return b.of(tool).calling }

// Ended is the text of a tool call that ended as e says.
func (b *Phrasebook) Ended(e *tool.CallEnd) string {
	p := b.of(e.Tool)
	switch {
	case e.ErrorClass == tool.ClassDeclined:
		return p.declined
	case e.IsError && e.ErrorClass != "":
		return p.failed + " (" + e.ErrorClass + ")"
	case e.IsError:
		return p.failed
	}
	return p.returned
}

// Interrupt ends the named turn: a running one is cancelled and ends at
// turn.completed (interrupted); a waiting one gives up its pause, which
// closes what the paused run held.
func (s *session) Interrupt(ctx context.Context, turnID string) error {
	s.mu.Lock()
	if t := s.active; t != nil && t.id == turnID {
		s.mu.Unlock()
		t.cancel(errInterrupted)
		return nil
	}
	p := s.pending
	if p == nil || p.TurnID != turnID {
		// Not begun yet (or already over: turn ids are never reused).
		s.interruptNext = turnID
		s.mu.Unlock()
		return nil
	}
	s.pending, s.record.Pending = nil, nil
	s.interruptedWaiting = turnID
	s.markLocked(turnID)
	rec := s.record.view()
	s.mu.Unlock()
	if _, err := s.in.agent.AbandonCheckpoint(ctx, p.Checkpoint); err != nil && !errors.Is(err, agent.ErrCheckpointAbandoned) {
		return fmt.Errorf("native: giving up the paused turn: %w", err)
	}
	if err := s.in.save(ctx, s.binding, rec); err != nil {
		return fmt.Errorf("native: saving the conversation after the interrupt: %w", err)
	}
	return nil
}

// Close stops a running turn and waits for it, then closes the session's
// tool sessions: the session-scoped ones, and what a pause still holds.
// A waiting turn is given up only when the host asks for the close
// (CloseRequested): the pause is abandoned and the stored conversation
// no longer waits. Any other reason (shutdown, eviction, a rejected
// opening) keeps it: what the pause holds here closes
// (agent.ReleaseCheckpoint), and a later Resume comes back waiting on
// the request.
//
// A run parked in the host's hands (the host holds one of its outputs:
// its loop body is running, or it pulls with iter.Pull and has not asked
// for the next) cannot be waited for: the host may be the caller. It is
// cancelled, takes no more outputs, and closes the tool sessions itself
// as soon as the host lets go of it.
func (s *session) Close(ctx context.Context, reason provider.CloseReason) error {
	s.mu.Lock()
	s.closing = true
	t := s.active
	s.mu.Unlock()
	if t != nil {
		if t.stopForClose(reason) {
			return nil
		}
		select {
		case <-t.returned():
		case <-ctx.Done():
			return fmt.Errorf("native: the session's turn did not stop before the close's deadline; close again: %w", context.Cause(ctx))
		}
	}
	if err := s.settlePause(ctx, reason); err != nil {
		return err
	}
	s.teardown(ctx, reason)
	return nil
}

// settlePause deals with a waiting turn as the session closes: kept for a
// later Resume, or given up when the host closes the conversation.
func (s *session) settlePause(ctx context.Context, reason provider.CloseReason) error {
	s.mu.Lock()
	p := s.pending
	keep := reason != provider.CloseRequested
	if p != nil && !keep {
		s.pending, s.record.Pending = nil, nil
		s.markLocked(p.TurnID)
		s.unsaved = true
	}
	unsaved := s.unsaved
	rec := s.record.view()
	s.mu.Unlock()
	if p != nil && keep {
		// Not held here any more; a checkpoint already spent here has
		// nothing left to release.
		if _, err := s.in.agent.ReleaseCheckpoint(ctx, p.Checkpoint); err != nil &&
			!errors.Is(err, agent.ErrCheckpointAbandoned) && !errors.Is(err, agent.ErrAlreadyResumed) {
			return fmt.Errorf("native: releasing the paused turn; close again: %w", err)
		}
	}
	if unsaved {
		// The teardown abandons the pause in the agent; the store must no
		// longer say the conversation waits.
		if err := s.in.save(ctx, s.binding, rec); err != nil {
			return fmt.Errorf("native: saving the conversation after giving up its waiting turn; close again: %w", err)
		}
		s.mu.Lock()
		s.unsaved = false
		s.mu.Unlock()
	}
	return nil
}

// teardown closes the session's tool sessions and forgets it.
func (s *session) teardown(ctx context.Context, reason provider.CloseReason) {
	s.in.agent.CloseToolSessionsReason(ctx, s.id, teardownReason(reason))
	s.in.forget(s)
}

func teardownReason(r provider.CloseReason) toolsession.Reason {
	switch r {
	case provider.CloseEvicted:
		return toolsession.ReasonEvicted
	case provider.CloseShutdown:
		return toolsession.ReasonShutdown
	}
	return toolsession.ReasonSessionEnd
}
