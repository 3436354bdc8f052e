package durable

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// Names of the workflow, its activities, signals and update. They are part
// of the history: a running workflow needs workers that know them.
const (
	WorkflowName   = "agentry.turn"
	modelActivity  = "agentry.model"
	toolActivity   = "agentry.tool"
	recordActivity = "agentry.record"
	markActivity   = "agentry.mark"
	limitActivity  = "agentry.limit"
	signalDecision = "agentry.decision"
	signalStop     = "agentry.interrupt"
	updateAdvance  = "agentry.advance"
)

// TurnInput is a turn workflow's input: plain JSON, everything the turn
// loop needs, so any worker can run it.
type TurnInput struct {
	Binding   string         `json:"binding"`
	SessionID string         `json:"sessionId"`
	TurnID    string         `json:"turnId"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	System    string         `json:"system,omitempty"`
	// Model names the model, for the usage of a model call that failed
	// (one that answered names itself).
	Model string `json:"model,omitempty"`
	// Context is the host binding's instructions, placed before the
	// conversation in every model call and never stored with it.
	Context *llm.Message `json:"context,omitempty"`
	// Messages is the conversation before the turn.
	Messages []llm.Message `json:"messages"`
	Input    string        `json:"input"`
	// Tools are the tools the model is offered: the agent's and the ones
	// the session's host binding lends.
	Tools []llm.ToolDef `json:"tools,omitempty"`
	// CheckIns names the tools every call of which waits for a decision.
	CheckIns []string `json:"checkIns,omitempty"`
	// ToolQueue is the task queue of the replica holding the session:
	// its live tool sessions, its lent host tools and its caller.
	ToolQueue     string `json:"toolQueue"`
	MaxIterations int    `json:"maxIterations"`
	// MaxParallelTools bounds the tool calls of one model response that
	// run at once (0: agent.DefaultMaxParallelTools).
	MaxParallelTools int           `json:"maxParallelTools,omitempty"`
	Heartbeat        time.Duration `json:"heartbeat"`
	ToolTimeout      time.Duration `json:"toolTimeout"`
	ToolStart        time.Duration `json:"toolStart"`
	// PinnedStart is how long a model call waits for the session's
	// replica before it goes to any replica, and how long the turn's
	// marks (its end, a pause) wait before they are skipped. Zero: model
	// calls go to the shared queue from the start.
	PinnedStart   time.Duration `json:"pinnedStart,omitempty"`
	ModelTimeout  time.Duration `json:"modelTimeout"`
	ModelAttempts int32         `json:"modelAttempts"`
	// Limited is set when the turn runs under its caller's limit (a
	// host's budget, TurnRequest.Limit): before each model call after the
	// first, the limit activity asks it on the session's replica, and a
	// crossing ends the turn with one model call with tools withheld.
	Limited bool `json:"limited,omitempty"`
}

// TurnResult is how a turn workflow ended.
type TurnResult struct {
	// Outcome is "completed", "interrupted" or "failed".
	Outcome string `json:"outcome"`
	// Answer is the model's final text, if any.
	Answer string `json:"answer,omitempty"`
	// Problem says why a failed turn failed.
	Problem string `json:"problem,omitempty"`
	// Steps are what the turn did, in order: the model's texts and the
	// tool calls.
	Steps []Step `json:"steps,omitempty"`
	// AskedAt gives, for each check-in the turn waited on, how many of
	// Steps came before it.
	AskedAt map[string]int `json:"askedAt,omitempty"`
	// Added is what the turn added to the conversation.
	Added []llm.Message `json:"added"`
	// Usage is what the whole turn used, across its pauses.
	Usage llm.TurnUsage `json:"usage"`
	// Limited names the limit the turn crossed: its answer came from a
	// wrap-up model call with tools withheld.
	Limited string `json:"limited,omitempty"`
}

// Step is one thing a turn did: a model text (Text) or a tool call (Tool,
// CallID, and how it ended).
type Step struct {
	Iteration  int    `json:"iteration"`
	Text       string `json:"text,omitempty"`
	Tool       string `json:"tool,omitempty"`
	CallID     string `json:"callId,omitempty"`
	IsError    bool   `json:"isError,omitempty"`
	ErrorClass string `json:"errorClass,omitempty"`
}

// Ask is a check-in the workflow waits on.
type Ask struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	Tool   string `json:"tool"`
	CallID string `json:"callId,omitempty"`
}

// Stop is where a turn stands, as the advance update reports it: waiting
// on Ask (after Steps, with AskedAt), or done with Result.
type Stop struct {
	Ask     *Ask           `json:"ask,omitempty"`
	Steps   []Step         `json:"steps,omitempty"`
	AskedAt map[string]int `json:"askedAt,omitempty"`
	Done    bool           `json:"done"`
	Result  *TurnResult    `json:"result,omitempty"`
}

// Decision answers an Ask (the decision signal).
type Decision struct {
	RequestID string `json:"requestId"`
	Approve   bool   `json:"approve"`
	Note      string `json:"note,omitempty"`
}

// ModelInput is a model activity's input.
type ModelInput struct {
	SessionID string         `json:"sessionId,omitempty"`
	TurnID    string         `json:"turnId,omitempty"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	Iteration int            `json:"iteration,omitempty"`
	System    string         `json:"system,omitempty"`
	Messages  []llm.Message  `json:"messages"`
	Tools     []llm.ToolDef  `json:"tools,omitempty"`
	// NoToolCalls asks the model to call no tool: the wrap-up call of a
	// turn that crossed its limit (llm.Request.NoToolCalls).
	NoToolCalls bool `json:"noToolCalls,omitempty"`
}

// LimitInput is a limit activity's input: what the turn used so far,
// across its pauses, for its caller's limit to judge.
type LimitInput struct {
	TurnID string        `json:"turnId"`
	Used   llm.TurnUsage `json:"used"`
}

// ToolInput is a tool activity's input: one call the loop asks for.
type ToolInput struct {
	// Binding names the conversation, whose session on this replica may
	// lend the tool.
	Binding   string         `json:"binding,omitempty"`
	SessionID string         `json:"sessionId"`
	RunID     string         `json:"runId"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	// Call is the call; when Call.Refused is set (a declined call, an
	// unknown tool) the activity does not run the tool, only tells of it
	// on the session's replica.
	Call agent.ToolCall `json:"call"`
}

// RecordInput is a record activity's input: a pause to note, or a turn to
// commit to the stored conversation.
type RecordInput struct {
	Binding  string         `json:"binding"`
	TurnID   string         `json:"turnId"`
	Identity *tool.Identity `json:"identity,omitempty"`
	Ask      *Ask           `json:"ask,omitempty"`
	Added    []llm.Message  `json:"added,omitempty"`
	Done     bool           `json:"done"`
}

// MarkInput is a mark activity's input: the turn paused on Ask, or ended
// with Outcome. It runs on the session's replica, which closes the
// turn's run-scoped tool sessions and tells its event sink.
type MarkInput struct {
	SessionID string         `json:"sessionId"`
	TurnID    string         `json:"turnId"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	Ask       *Ask           `json:"ask,omitempty"`
	Outcome   string         `json:"outcome,omitempty"`
	Problem   string         `json:"problem,omitempty"`
	// Class is a failed turn's failure class (an event.Class constant).
	Class string `json:"class,omitempty"`
	// Unsettled are the door ids of calls that asked a person mid-call
	// and whose turn ended before the answer: their call-scoped sessions
	// close with the turn.
	Unsettled  []string      `json:"unsettled,omitempty"`
	Iterations int           `json:"iterations"`
	Took       time.Duration `json:"took"`
}

// turnState is the workflow's own state, read by its handlers.
type turnState struct {
	stop        Stop
	decisions   map[string]Decision
	interrupted bool
	steps       []Step
	askedAt     map[string]int
	// pinnedGone: a model call found the session's replica absent, so the
	// turn's later model calls go to the shared queue.
	pinnedGone bool
	// since and segment are when the current stretch (the start, or the
	// last decision) began and its model calls, for the turn's marks.
	since   time.Time
	segment int
	// saveProblem says why a pause could not be saved.
	saveProblem string
}

// TurnWorkflow runs one turn: agentry's turn loop (agent.Loop) over an
// executor whose model and tool calls are activities, until an answer,
// an interrupt or a failure; a pause waits for the decision signal, then
// the loop goes on from where it stood. It is deterministic: everything
// it learns comes through activities and signals, recorded in the
// history.
func TurnWorkflow(ctx workflow.Context, in TurnInput) (TurnResult, error) {
	st := &turnState{decisions: map[string]Decision{}, askedAt: map[string]int{}, since: workflow.Now(ctx)}
	tctx, cancel := workflow.WithCancel(ctx)
	if err := workflow.SetUpdateHandler(ctx, updateAdvance, func(ctx workflow.Context, ack string) (Stop, error) {
		err := workflow.Await(ctx, func() bool {
			return st.stop.Done || (st.stop.Ask != nil && st.stop.Ask.ID != ack)
		})
		return st.stop, err
	}); err != nil {
		return TurnResult{}, err
	}
	decisions := workflow.GetSignalChannel(ctx, signalDecision)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var d Decision
			decisions.Receive(ctx, &d)
			if _, seen := st.decisions[d.RequestID]; !seen {
				st.decisions[d.RequestID] = d
			}
		}
	})
	stops := workflow.GetSignalChannel(ctx, signalStop)
	workflow.Go(ctx, func(ctx workflow.Context) {
		stops.Receive(ctx, nil)
		st.interrupted = true
		cancel()
	})

	res, why := runTurn(ctx, tctx, in, st)
	res.Steps, res.AskedAt = st.steps, st.askedAt

	// The turn is committed to the store even when it was interrupted: a
	// context of its own, since tctx may be cancelled.
	rctx := workflow.WithActivityOptions(ctx, recordOptions())
	if err := workflow.ExecuteActivity(rctx, recordActivity, RecordInput{Binding: in.Binding, TurnID: in.TurnID,
		Identity: in.Identity, Added: res.Added, Done: true}).Get(rctx, nil); err != nil {
		res.Outcome, res.Problem, why.class = "failed", "the turn could not be saved: "+err.Error(), tool.ClassStore
	}
	mark(ctx, in, st, MarkInput{Outcome: res.Outcome, Problem: res.Problem, Class: why.class, Unsettled: why.unsettled})
	st.stop = Stop{Done: true, Result: &res}
	// Answer every advance in flight before the workflow ends.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return res, nil
}

func recordOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 10}}
}

// mark runs the mark activity on the session's replica, once: it closes
// what the turn held there and emits the turn's events. A replica that
// does not take it within PinnedStart is gone, and so is what it held;
// the turn goes on without the mark.
func mark(ctx workflow.Context, in TurnInput, st *turnState, m MarkInput) {
	mctx := pinnedOnce(ctx, in)
	m.SessionID, m.TurnID, m.Identity = in.SessionID, in.TurnID, in.Identity
	m.Iterations, m.Took = st.segment, workflow.Now(ctx).Sub(st.since)
	_ = workflow.ExecuteActivity(mctx, markActivity, m).Get(mctx, nil)
}

// pinnedOnce is the context of an activity that tells the session's
// replica something (a mark, a declined call): attempted once, skipped
// when the replica does not take it within PinnedStart.
func pinnedOnce(ctx workflow.Context, in TurnInput) workflow.Context {
	wait := in.PinnedStart
	if wait <= 0 {
		wait = in.ToolStart
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: in.ToolQueue,
		ScheduleToStartTimeout: wait, StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
}

// ended is what the end of a turn tells its mark besides the result.
type ended struct {
	class     string
	unsettled []string
}

// runTurn runs the loop until the turn ends, waiting at each pause for
// the decision. tctx is the context of the turn's model and tool calls,
// cancelled by an interrupt; ctx is not. Added holds the messages through
// the last complete exchange, so a stored conversation never ends with a
// tool call that has no result.
func runTurn(ctx, tctx workflow.Context, in TurnInput, st *turnState) (TurnResult, ended) {
	x := newSteps(ctx, tctx, in, st)
	var exec agent.Executor = x
	if in.Limited {
		exec = limitedSteps{x}
	}
	state := &agent.State{RunID: in.TurnID, Messages: make([]llm.Message, 0, len(in.Messages)+8)}
	state.Messages = append(append(state.Messages, in.Messages...), llm.Message{Role: llm.RoleUser, Content: in.Input})
	base := len(in.Messages)
	var res TurnResult
	var why ended
	var d *agent.Decision
	for asks := 1; ; asks++ {
		x.before = res.Usage
		end := agent.Loop(exec, state, d, in.MaxIterations)
		res.Usage.Add(end.Usage)
		if end.Outcome != event.OutcomePaused {
			res.Outcome, res.Answer, res.Limited = outcomeOf(end.Outcome), end.Output, end.Limited
			if end.Err != nil {
				res.Problem, why.class = end.Err.Error(), end.Class
			}
			why.unsettled = end.Unsettled
			break
		}
		var stop string
		if d, stop = awaitDecision(ctx, in, st, state, asks); stop != "" {
			res.Outcome, res.Problem, why.class = stop, st.saveProblem, tool.ClassStore
			if stop == "interrupted" {
				res.Problem, why.class = "", tool.ClassCancelled
			}
			why.unsettled = askedMidCall(state)
			break
		}
	}
	res.Added = complete(state.Messages[base:])
	return res, why
}

// awaitDecision records the pause (in the store, and on the session's
// replica) and waits for its decision. stop is "interrupted" when the
// turn was interrupted instead, and "failed" when the pause could not be
// saved (x.saveProblem says why).
func awaitDecision(ctx workflow.Context, in TurnInput, st *turnState, state *agent.State, n int) (d *agent.Decision, stop string) {
	question, name, callID := state.Asking()
	ask := &Ask{ID: fmt.Sprintf("%s.ask%d", in.TurnID, n), Tool: name, CallID: callID, Prompt: question}
	rctx := workflow.WithActivityOptions(ctx, recordOptions())
	if err := workflow.ExecuteActivity(rctx, recordActivity, RecordInput{Binding: in.Binding, TurnID: in.TurnID,
		Identity: in.Identity, Ask: ask}).Get(rctx, nil); err != nil && !st.interrupted {
		st.saveProblem = "the pause could not be saved: " + cause(err)
		return nil, "failed"
	}
	if !st.interrupted {
		mark(ctx, in, st, MarkInput{Ask: ask})
	}
	st.askedAt[ask.ID] = len(st.steps)
	st.stop = Stop{Ask: ask, Steps: st.steps, AskedAt: st.askedAt}
	_ = workflow.Await(ctx, func() bool { _, ok := st.decisions[ask.ID]; return ok || st.interrupted })
	st.stop = Stop{}
	st.since, st.segment = workflow.Now(ctx), 0
	if st.interrupted {
		return nil, "interrupted"
	}
	dec := st.decisions[ask.ID]
	return &agent.Decision{Approve: dec.Approve, Note: dec.Note}, ""
}

// outcomeOf names a loop's outcome as a turn's.
func outcomeOf(o string) string {
	switch o {
	case event.OutcomeAnswer:
		return "completed"
	case event.OutcomeCancelled:
		return "interrupted"
	}
	return "failed"
}

// askedMidCall are the door ids of the waiting calls that asked a person
// mid-call: their call-scoped sessions are open on the session's replica.
func askedMidCall(st *agent.State) []string {
	if len(st.Messages) == 0 {
		return nil
	}
	calls := st.Messages[len(st.Messages)-1].ToolCalls
	var ids []string
	for _, w := range st.Waiting {
		if w.Asked {
			ids = append(ids, st.RunID+":"+calls[w.Index].ID)
		}
	}
	return ids
}

// complete is msgs through the last complete exchange: without a final
// assistant message whose tool calls have no results.
func complete(msgs []llm.Message) []llm.Message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == llm.RoleAssistant && len(msgs[n-1].ToolCalls) > 0 {
		msgs = msgs[:n-1]
	}
	return append([]llm.Message(nil), msgs...)
}
