package durable

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// session is one conversation open on this replica. Its turns run as
// workflows; it follows them and turns their stops into outputs.
type session struct {
	in       *instance
	id       string
	binding  provider.Binding
	identity *tool.Identity
	// defs are the tools the model is offered: the agent's, then the
	// ones lent (lent, by name); context is the lent instructions.
	defs    []llm.ToolDef
	lent    map[string]tool.Tool
	context *llm.Message

	mu      sync.Mutex
	pending *native.PendingTurn // the turn waiting on a decision, if any
	// stopped are the turns an Interrupt named, so one that came before
	// its turn's workflow was started still reaches it.
	stopped map[string]bool
}

var (
	_ provider.Session     = (*session)(nil)
	_ provider.Interrupter = (*session)(nil)
	_ provider.Pender      = (*session)(nil)
)

func (s *session) Binding() provider.Binding { return s.binding }

// Pending reports the check-in the conversation's last turn waits on.
func (s *session) Pending() (string, provider.Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return "", provider.Request{}, false
	}
	p := s.pending
	return p.TurnID, provider.Request{ID: p.Checkpoint.ID, Kind: provider.RequestApproval, Prompt: p.Question, Tool: p.Tool}, true
}

func (s *session) RunTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		rec, err := s.in.cfg.Store.Load(ctx, s.binding)
		if err != nil {
			yield(provider.Output{}, fmt.Errorf("durable: loading the conversation: %w", err))
			return
		}
		cfg := s.in.cfg
		msgs := rec.Conversation.Messages
		if req.Context != "" {
			// The host's note for this turn, before the person's words (the
			// model sees it in this turn; the record keeps what the turn adds).
			msgs = append(slices.Clip(msgs), llm.Message{Role: llm.RoleUser, Content: req.Context})
		}
		in := TurnInput{Binding: string(s.binding), SessionID: s.id, TurnID: req.TurnID, Identity: s.identity,
			System: cfg.System, Model: llm.NameOf(cfg.Model), Context: s.context, Messages: msgs, Input: req.Input, Tools: s.defs,
			CheckIns: s.in.checkIns, ToolQueue: s.in.toolQueue, MaxIterations: cfg.MaxIterations,
			Heartbeat: cfg.Heartbeat, ToolTimeout: cfg.ToolTimeout, ToolStart: cfg.ToolStart, PinnedStart: cfg.PinnedStart,
			ModelTimeout: cfg.ModelTimeout, ModelAttempts: cfg.ModelAttempts, Limited: req.Limit != nil}
		wid := workflowID(s.binding, req.TurnID)
		if err := provider.CheckStep(ctx, provider.StepAgent); err != nil { // the host's, before the turn is handed over
			yield(provider.Output{}, fmt.Errorf("%w: %w", provider.ErrNotStarted, err))
			return
		}
		// Watched before it starts: its first activity may come at once.
		w, unwatch := s.in.watch(wid, req.Limit)
		defer unwatch()
		_, err = cfg.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: wid, TaskQueue: cfg.TaskQueue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, WorkflowName, in)
		if err != nil {
			yield(provider.Output{}, fmt.Errorf("%w: starting the turn's workflow: %w", provider.ErrNotStarted, err))
			return
		}
		// The workflow exists now: an interrupt that came first reaches it.
		s.mu.Lock()
		stop := s.stopped[req.TurnID]
		s.mu.Unlock()
		if stop {
			if err := cfg.Client.SignalWorkflow(ctx, wid, "", signalStop, nil); err != nil {
				yield(provider.Output{}, fmt.Errorf("durable: interrupting the turn's workflow: %w", err))
				return
			}
		}
		s.in.emit(event.TypeTurnStart, &event.TurnStart{MessageChars: len(req.Input), Tools: len(s.defs)}, s.in.meta(s.id, req.TurnID, s.identity))
		if !yield(provider.Output{Kind: provider.OutputTurnStarted, SessionID: s.id, TurnID: req.TurnID}, nil) {
			s.interrupt(wid)
			return
		}
		s.follow(ctx, req.TurnID, "", w, yield)
	}
}

func (s *session) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		wid := workflowID(s.binding, res.TurnID)
		w, unwatch := s.in.watch(wid, res.Limit)
		defer unwatch()
		d := Decision{RequestID: res.RequestID, Approve: res.Approve, Note: res.Note}
		if err := provider.CheckStep(ctx, provider.StepAgent); err != nil { // the host's, before the turn goes on
			yield(provider.Output{}, fmt.Errorf("%w: %w", provider.ErrNotStarted, err))
			return
		}
		if err := s.in.cfg.Client.SignalWorkflow(ctx, wid, "", signalDecision, d); err != nil {
			yield(provider.Output{}, fmt.Errorf("durable: sending the decision to the turn's workflow: %w", err))
			return
		}
		s.mu.Lock()
		p := s.pending
		s.pending = nil
		s.mu.Unlock()
		meta := s.in.meta(s.id, res.TurnID, s.identity)
		s.in.emit(event.TypeTurnStart, &event.TurnStart{Resumed: true, Tools: len(s.defs)}, meta)
		if p != nil && p.TurnID == res.TurnID {
			s.in.emit(event.TypePauseResume, &event.PauseResume{Tool: p.Tool, Approved: res.Approve}, meta)
		}
		s.follow(ctx, res.TurnID, res.RequestID, w, yield)
	}
}

// follow yields the turn's outputs as the activities on this replica
// hand them over (w), until the turn's next stop after the check-in ack:
// a request, or its end. The stop lists every step; those the live view
// did not give are given then. A caller that goes away (ctx, or a yield
// that returns false) interrupts the workflow; a process that dies does
// not, and the turn then goes on without it.
func (s *session) follow(ctx context.Context, turnID, ack string, w *watch, yield func(provider.Output, error) bool) {
	wid := workflowID(s.binding, turnID)
	type next struct {
		stop Stop
		err  error
	}
	actx, cancel := context.WithCancel(ctx)
	got := make(chan next, 1)
	go func() {
		st, err := s.advance(actx, wid, ack)
		got <- next{st, err}
	}()
	seen := map[string]bool{}
	var n next
	for waiting := true; waiting; {
		select {
		case lo := <-w.ch:
			seen[lo.key] = true
			lo.out.SessionID = s.id // the turn may have begun in another session of the conversation
			if !yield(lo.out, nil) {
				cancel()
				<-got
				s.interrupt(wid)
				return
			}
		case n = <-got:
			waiting = false
		}
	}
	cancel()
	if n.err != nil {
		if ctx.Err() != nil {
			s.interrupt(wid)
		}
		yield(provider.Output{}, n.err)
		return
	}
	stop := n.stop
	steps, askedAt := stop.Steps, stop.AskedAt
	if r := stop.Result; r != nil {
		steps, askedAt = r.Steps, r.AskedAt
	}
	to := len(steps)
	if a := stop.Ask; a != nil {
		if i, ok := askedAt[a.ID]; ok && i <= to {
			to = i
		}
	}
	from := 0
	if ack != "" {
		from = min(askedAt[ack], to)
	}
	if a := stop.Ask; a != nil {
		// Pending from here, whether or not the caller takes the request:
		// the workflow waits for it.
		s.mu.Lock()
		s.pending = &native.PendingTurn{TurnID: turnID, Question: a.Prompt, Tool: a.Tool}
		s.pending.Checkpoint.ID = a.ID
		s.mu.Unlock()
	}
	for _, st := range steps[from:to] {
		for _, o := range s.missed(turnID, st, seen) {
			if !yield(o, nil) {
				return
			}
		}
	}
	out := provider.Output{SessionID: s.id, TurnID: turnID}
	if a := stop.Ask; a != nil {
		out.Kind = provider.OutputRequest
		out.Request = &provider.Request{ID: a.ID, Kind: provider.RequestApproval, Prompt: a.Prompt, Tool: a.Tool}
		yield(out, nil)
		return
	}
	r := stop.Result
	// The workflow counts the whole turn, across its pauses: the usage
	// goes with the turn's end (none with a pause, so nothing counts twice).
	u := r.Usage
	u.Basis = llm.BasisCounted
	uo := out
	uo.Kind, uo.Usage = provider.OutputUsage, &u
	if !yield(uo, nil) {
		return
	}
	if r.Outcome == "failed" && r.Problem != "" {
		o := out
		o.Kind, o.Text = provider.OutputActivity, "the turn failed: "+r.Problem
		if !yield(o, nil) {
			return
		}
	}
	out.Kind, out.Outcome = provider.OutputTurnCompleted, provider.Outcome(r.Outcome)
	yield(out, nil)
}

// missed are the outputs of a step that the live view did not give.
func (s *session) missed(turnID string, st Step, seen map[string]bool) []provider.Output {
	o := provider.Output{SessionID: s.id, TurnID: turnID}
	var outs []provider.Output
	if st.Tool == "" {
		if st.Text != "" && !seen[stepKey("text", st.Iteration, "")] {
			o.Kind, o.Text = provider.OutputText, st.Text
			outs = append(outs, o)
		}
		return outs
	}
	o.Kind = provider.OutputActivity
	if !seen[stepKey("start", st.Iteration, st.CallID)] {
		o.Text = s.in.phrases.Calling(st.Tool)
		outs = append(outs, o)
	}
	if !seen[stepKey("end", st.Iteration, st.CallID)] {
		o.Text = s.in.phrases.Ended(&tool.CallEnd{Tool: st.Tool, IsError: st.IsError, ErrorClass: st.ErrorClass})
		outs = append(outs, o)
	}
	return outs
}

// advance asks the workflow for its next stop after ack (the advance
// update, which returns when the turn pauses on another check-in or
// ends). A workflow that already ended answers through its result.
func (s *session) advance(ctx context.Context, wid, ack string) (Stop, error) {
	c := s.in.cfg.Client
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: wid, UpdateID: "advance/" + ack, UpdateName: updateAdvance,
		Args: []any{ack}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var stop Stop
	if err == nil {
		err = h.Get(ctx, &stop)
	}
	if err == nil && (stop.Ask != nil || stop.Result != nil) {
		return stop, nil
	}
	if ctx.Err() != nil {
		return Stop{}, ctx.Err()
	}
	var res TurnResult
	if gerr := c.GetWorkflow(ctx, wid, "").Get(ctx, &res); gerr != nil {
		if err == nil {
			err = gerr
		}
		return Stop{}, fmt.Errorf("durable: following the turn's workflow: %w", errors.Join(err, gerr))
	}
	return Stop{Done: true, Result: &res}, nil
}

// interrupt asks the turn's workflow to stop, within a bound of its own.
func (s *session) interrupt(wid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.in.cfg.Client.SignalWorkflow(ctx, wid, "", signalStop, nil)
}

// Interrupt stops the turn's workflow. A running turn's outputs end at
// turn.completed (interrupted); a waiting turn ends with no more outputs.
func (s *session) Interrupt(ctx context.Context, turnID string) error {
	s.mu.Lock()
	if s.stopped == nil {
		s.stopped = map[string]bool{}
	}
	s.stopped[turnID] = true
	s.mu.Unlock()
	err := s.in.cfg.Client.SignalWorkflow(ctx, workflowID(s.binding, turnID), "", signalStop, nil)
	s.mu.Lock()
	if s.pending != nil && s.pending.TurnID == turnID {
		s.pending = nil
	}
	s.mu.Unlock()
	var nf *serviceerror.NotFound
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("durable: interrupting the turn's workflow: %w", err)
	}
	return nil
}

// Close closes the conversation's tool sessions on this replica. A turn
// waiting on a check-in keeps waiting (a resumed session comes back to
// it) unless the host closed the conversation, which ends it.
func (s *session) Close(ctx context.Context, reason provider.CloseReason) error {
	// Forgotten first: a tool call of its turn that starts from here on
	// finds no lent host tools (the wrapper releases the binding once
	// Close returns).
	s.in.forget(s)
	s.mu.Lock()
	p := s.pending
	s.mu.Unlock()
	if p != nil && (reason == provider.CloseRequested || reason == "") {
		if err := s.Interrupt(ctx, p.TurnID); err != nil {
			return err
		}
	}
	r := toolsession.ReasonSessionEnd
	switch reason {
	case provider.CloseShutdown:
		r = toolsession.ReasonShutdown
	case provider.CloseEvicted:
		r = toolsession.ReasonEvicted
	}
	s.in.tier.FireSession(ctx, s.id, r)
	return nil
}
