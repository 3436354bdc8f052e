package native

import (
	"context"
	"errors"
	"fmt"
	"iter"
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

// outputBuffer is how many outputs a run may get ahead of its host before
// it waits for the host to pull.
const outputBuffer = 16

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
	pending *pending
	// interruptNext is a turn interrupted before its run began.
	interruptNext string
	// interruptedWaiting is the last waiting turn an interrupt ended.
	interruptedWaiting string
	closing            bool
}

var (
	_ provider.Session     = (*session)(nil)
	_ provider.Interrupter = (*session)(nil)
)

type pending struct {
	turnID string
	cp     agent.Checkpoint
}

// turn is one run of the agent (a Run, or a ResumeWith continuing one),
// and the outputs it has produced that the host has not pulled yet.
type turn struct {
	s            *session
	id           string
	continuation bool
	ctx          context.Context
	cancel       context.CancelCauseFunc
	out          chan provider.Output
	gone         chan struct{} // closed when nobody will pull again
	goneOnce     sync.Once
	done         chan struct{} // closed when the run has returned
	started      atomic.Bool   // the agent began the turn (turn_start)

	mu       sync.Mutex
	runID    string
	streamed map[int]bool // iterations whose text arrived as deltas

	res agent.Result
	err error
}

func (s *session) Binding() provider.Binding { return s.binding }

func notStarted(format string, args ...any) error {
	return fmt.Errorf("%w: native: "+format, append([]any{provider.ErrNotStarted}, args...)...)
}

// newTurnLocked makes t the active turn.
func (s *session) newTurnLocked(ctx context.Context, id string, continuation bool, runID string) *turn {
	tctx, cancel := context.WithCancelCause(ctx)
	t := &turn{s: s, id: id, continuation: continuation, ctx: tctx, cancel: cancel, runID: runID,
		out: make(chan provider.Output, outputBuffer), gone: make(chan struct{}), done: make(chan struct{}),
		streamed: map[int]bool{}}
	if s.interruptNext == id {
		s.interruptNext = ""
		cancel(errInterrupted)
	}
	s.active = t
	return t
}

// conversationLocked is the conversation a run continues: the stored one,
// after the binding's instructions when there are some.
func (s *session) conversationLocked() *agent.Conversation {
	c := s.record.Conversation
	c.Identity = c.Identity.Clone()
	msgs := make([]llm.Message, 0, len(c.Messages)+1)
	if s.context != nil {
		msgs = append(msgs, *s.context)
	}
	c.Messages = append(msgs, c.Messages...)
	return &c
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
		t := s.newTurnLocked(ctx, req.TurnID, false, "")
		in := agent.Input{Message: req.Input, SessionID: s.id, Identity: s.identity.Clone(),
			Conversation: s.conversationLocked(), Tools: s.tools}
		s.mu.Unlock()
		t.start(func(ctx context.Context) (agent.Result, error) { return s.in.agent.Run(ctx, in) })
		s.drive(t, nil, yield)
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
		case p == nil || p.turnID != res.TurnID || p.cp.ID != res.RequestID:
			s.mu.Unlock()
			yield(provider.Output{}, notStarted("no request with that id is pending in this turn"))
			return
		}
		s.pending = nil
		t := s.newTurnLocked(ctx, res.TurnID, true, p.cp.RunID)
		s.mu.Unlock()
		d := agent.Decision{Approve: res.Approve, Note: res.Note}
		t.start(func(ctx context.Context) (agent.Result, error) {
			return s.in.agent.ResumeWith(ctx, p.cp, d, agent.ResumeOptions{Tools: s.tools})
		})
		s.drive(t, p, yield)
	}
}

// start runs fn, the agent's side of the turn, in a goroutine the turn's
// drive (or Close) waits for.
func (t *turn) start(fn func(context.Context) (agent.Result, error)) {
	go func() {
		defer close(t.done)
		defer func() {
			if v := recover(); v != nil {
				t.res, t.err = agent.Result{}, &provider.PanicError{Where: "the agent", Value: v}
			}
		}()
		t.res, t.err = fn(t.ctx)
	}()
}

// stop cancels the run and releases anything waiting to hand the host an
// output.
func (t *turn) stop(cause error) {
	t.cancel(cause)
	t.goneOnce.Do(func() { close(t.gone) })
}

// drive hands the turn's outputs to the host as it pulls them, then how
// the turn ended. p is the request a continuation answers.
func (s *session) drive(t *turn, p *pending, yield func(provider.Output, error) bool) {
	defer t.cancel(nil)
	for {
		select {
		case o := <-t.out:
			if !yield(o, nil) {
				s.abandon(t)
				return
			}
			continue
		case <-t.done:
		}
		break
	}
	// The run has returned; hand over what it produced before it did.
	for more := true; more; {
		select {
		case o := <-t.out:
			if !yield(o, nil) {
				s.abandon(t)
				return
			}
		default:
			more = false
		}
	}
	outs, err := s.conclude(t, p)
	for _, o := range outs {
		if !yield(o, nil) {
			return
		}
	}
	if err != nil {
		yield(provider.Output{}, err)
	}
}

// abandon ends a turn the host stopped pulling: the run is cancelled and
// waited for, and a pause it reached is given up.
func (s *session) abandon(t *turn) {
	t.stop(errAbandoned)
	<-t.done
	s.mu.Lock()
	if s.active == t {
		s.active = nil
	}
	s.mu.Unlock()
	if t.err == nil && t.res.Paused != nil {
		_, _ = s.in.agent.AbandonCheckpoint(context.WithoutCancel(t.ctx), t.res.Paused.Checkpoint)
	}
}

// conclude maps how the run ended to the turn's last outputs, or to an
// error, and updates the session.
func (s *session) conclude(t *turn, p *pending) ([]provider.Output, error) {
	res, err := t.res, t.err
	cause := context.Cause(t.ctx)
	interrupted := errors.Is(cause, errInterrupted)

	s.mu.Lock()
	if s.active == t {
		s.active = nil
	}
	if !t.started.Load() {
		// The agent refused before the turn began (a busy or shut-down
		// agent, an empty message, a spent checkpoint): nothing happened.
		if p != nil && !s.closing {
			s.pending = p
		}
		s.mu.Unlock()
		if err == nil {
			err = errors.New("native: the agent returned without starting the turn")
		}
		return nil, fmt.Errorf("%w: %w", provider.ErrNotStarted, err)
	}
	completed := func(outcome provider.Outcome) provider.Output {
		return s.output(provider.OutputTurnCompleted, t.id, func(o *provider.Output) { o.Outcome = outcome })
	}

	var outs []provider.Output
	switch {
	case err == nil && res.Paused != nil && !interrupted:
		s.pending = &pending{turnID: t.id, cp: res.Paused.Checkpoint}
		s.mu.Unlock()
		pause := res.Paused
		return []provider.Output{s.output(provider.OutputRequest, t.id, func(o *provider.Output) {
			o.Request = &provider.Request{ID: pause.Checkpoint.ID, Kind: provider.RequestApproval,
				Prompt: pause.Question, Tool: pause.ToolName}
		})}, nil
	case err == nil && res.Paused != nil:
		// Interrupted as it paused: the turn ends here, and so does the
		// pause.
		s.mu.Unlock()
		if _, aerr := s.in.agent.AbandonCheckpoint(context.WithoutCancel(t.ctx), res.Paused.Checkpoint); aerr != nil {
			return nil, fmt.Errorf("native: giving up the pause of an interrupted turn: %w", aerr)
		}
		s.mu.Lock()
		outs = []provider.Output{completed(provider.OutcomeInterrupted)}
	case err == nil:
		s.record.Conversation = s.strip(*res.Conversation)
		outs = []provider.Output{completed(provider.OutcomeCompleted)}
	case interrupted:
		outs = []provider.Output{completed(provider.OutcomeInterrupted)}
	case errors.Is(err, agent.ErrShutdown), t.ctx.Err() != nil, errors.As(err, new(*provider.PanicError)):
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
	rec := s.record.clone()
	s.mu.Unlock()
	if err := s.in.store.Save(context.WithoutCancel(t.ctx), s.binding, rec); err != nil {
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

// observe hands one of the agent's events to the session's active turn.
func (s *session) observe(e event.Event) {
	s.mu.Lock()
	t := s.active
	s.mu.Unlock()
	if t != nil {
		t.observe(e)
	}
}

// observe maps an event of the turn's run to an output and waits until
// the host takes it (or nobody will).
func (t *turn) observe(e event.Event) {
	t.mu.Lock()
	switch {
	case t.runID == "":
		t.runID = e.Meta.RunID
	case e.Meta.RunID != t.runID:
		t.mu.Unlock()
		return
	}
	var o provider.Output
	switch p := e.Payload.(type) {
	case *event.TurnStart:
		t.started.Store(true)
		if t.continuation {
			t.mu.Unlock()
			return
		}
		o = t.s.output(provider.OutputTurnStarted, t.id, nil)
	case *event.LLMDelta:
		t.streamed[p.Iteration] = true
		if p.Text == "" {
			t.mu.Unlock()
			return
		}
		o = t.s.output(provider.OutputText, t.id, func(o *provider.Output) { o.Text = p.Text })
	case *event.LLMMessage:
		if p.Role != string(llm.RoleAssistant) || p.Content == "" || t.streamed[p.Iteration] {
			t.mu.Unlock()
			return
		}
		o = t.s.output(provider.OutputText, t.id, func(o *provider.Output) { o.Text = p.Content })
	case *event.ToolStart:
		o = t.s.output(provider.OutputActivity, t.id, func(o *provider.Output) { o.Text = "calling " + p.Tool })
	case *event.ToolEnd:
		o = t.s.output(provider.OutputActivity, t.id, func(o *provider.Output) { o.Text = toolEnded(p) })
	default:
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	if !t.started.Load() {
		return // nothing precedes turn.started
	}
	select {
	case t.out <- o:
	case <-t.gone:
	}
}

func toolEnded(p *event.ToolEnd) string {
	switch {
	case p.ErrorClass == "declined":
		return p.Tool + " was declined"
	case p.IsError && p.ErrorClass != "":
		return p.Tool + " returned an error (" + p.ErrorClass + ")"
	case p.IsError:
		return p.Tool + " returned an error"
	}
	return p.Tool + " returned"
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
	if p == nil || p.turnID != turnID {
		// Not begun yet (or already over: turn ids are never reused).
		s.interruptNext = turnID
		s.mu.Unlock()
		return nil
	}
	s.pending = nil
	s.interruptedWaiting = turnID
	s.markLocked(turnID)
	rec := s.record.clone()
	s.mu.Unlock()
	if _, err := s.in.agent.AbandonCheckpoint(ctx, p.cp); err != nil {
		return fmt.Errorf("native: giving up the paused turn: %w", err)
	}
	if err := s.in.store.Save(ctx, s.binding, rec); err != nil {
		return fmt.Errorf("native: saving the conversation after the interrupt: %w", err)
	}
	return nil
}

// Close stops a running turn and waits for it, then closes the session's
// tool sessions: the session-scoped ones, and what a pause still holds
// (agent.CloseToolSessions abandons the session's pauses).
func (s *session) Close(ctx context.Context, reason provider.CloseReason) error {
	s.mu.Lock()
	s.closing = true
	t := s.active
	s.mu.Unlock()
	if t != nil {
		t.stop(errClosing)
		select {
		case <-t.done:
		case <-ctx.Done():
			return fmt.Errorf("native: the session's turn did not stop before the close's deadline; close again: %w", context.Cause(ctx))
		}
	}
	s.in.agent.CloseToolSessionsReason(ctx, s.id, teardownReason(reason))
	s.in.forget(s)
	return nil
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
