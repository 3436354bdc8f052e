package durable

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

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
		in := TurnInput{Binding: string(s.binding), SessionID: s.id, TurnID: req.TurnID, Identity: s.identity,
			System: cfg.System, Messages: rec.Conversation.Messages, Input: req.Input, Tools: s.in.defs,
			CheckIns: s.in.checkIns, ToolQueue: s.in.toolQueue, MaxIterations: cfg.MaxIterations,
			Heartbeat: cfg.Heartbeat, ToolTimeout: cfg.ToolTimeout, ToolStart: cfg.ToolStart,
			ModelTimeout: cfg.ModelTimeout, ModelAttempts: cfg.ModelAttempts}
		wid := workflowID(s.binding, req.TurnID)
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
		if !yield(provider.Output{Kind: provider.OutputTurnStarted, SessionID: s.id, TurnID: req.TurnID}, nil) {
			return
		}
		s.follow(ctx, req.TurnID, "", yield)
	}
}

func (s *session) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		wid := workflowID(s.binding, res.TurnID)
		d := Decision{RequestID: res.RequestID, Approve: res.Approve, Note: res.Note}
		if err := s.in.cfg.Client.SignalWorkflow(ctx, wid, "", signalDecision, d); err != nil {
			yield(provider.Output{}, fmt.Errorf("durable: sending the decision to the turn's workflow: %w", err))
			return
		}
		s.mu.Lock()
		s.pending = nil
		s.mu.Unlock()
		s.follow(ctx, res.TurnID, res.RequestID, yield)
	}
}

// follow waits for the turn's next stop after the check-in ack and yields
// it: a request, or what the turn did and its end. A caller that goes
// away (ctx) interrupts the workflow; a process that dies does not, and
// the turn then goes on without it.
func (s *session) follow(ctx context.Context, turnID, ack string, yield func(provider.Output, error) bool) {
	wid := workflowID(s.binding, turnID)
	stop, err := s.advance(ctx, wid, ack)
	if err != nil {
		if ctx.Err() != nil {
			s.interrupt(wid)
		}
		yield(provider.Output{}, err)
		return
	}
	out := provider.Output{SessionID: s.id, TurnID: turnID}
	if a := stop.Ask; a != nil {
		s.mu.Lock()
		s.pending = &native.PendingTurn{TurnID: turnID, Question: a.Prompt, Tool: a.Tool}
		s.pending.Checkpoint.ID = a.ID
		s.mu.Unlock()
		out.Kind = provider.OutputRequest
		out.Request = &provider.Request{ID: a.ID, Kind: provider.RequestApproval, Prompt: a.Prompt, Tool: a.Tool}
		yield(out, nil)
		return
	}
	r := stop.Result
	// The turn is over: its run-scoped tool sessions close here, on the
	// replica that holds them.
	s.in.tier.FireRun(context.WithoutCancel(ctx), turnID)
	for _, act := range r.Activity {
		o := out
		o.Kind, o.Text = provider.OutputActivity, act
		if !yield(o, nil) {
			return
		}
	}
	text := r.Answer
	if r.Outcome == "failed" && r.Problem != "" {
		text = r.Problem
	}
	if text != "" {
		o := out
		o.Kind, o.Text = provider.OutputText, text
		if !yield(o, nil) {
			return
		}
	}
	out.Kind, out.Outcome = provider.OutputTurnCompleted, provider.Outcome(r.Outcome)
	yield(out, nil)
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
	s.in.forget(s)
	return nil
}
