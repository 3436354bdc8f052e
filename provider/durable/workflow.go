package durable

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

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
	ToolQueue     string        `json:"toolQueue"`
	MaxIterations int           `json:"maxIterations"`
	Heartbeat     time.Duration `json:"heartbeat"`
	ToolTimeout   time.Duration `json:"toolTimeout"`
	ToolStart     time.Duration `json:"toolStart"`
	// PinnedStart is how long a model call waits for the session's
	// replica before it goes to any replica, and how long the turn's
	// marks (its end, a pause) wait before they are skipped. Zero: model
	// calls go to the shared queue from the start.
	PinnedStart   time.Duration `json:"pinnedStart,omitempty"`
	ModelTimeout  time.Duration `json:"modelTimeout"`
	ModelAttempts int32         `json:"modelAttempts"`
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
}

// ToolInput is a tool activity's input.
type ToolInput struct {
	// Binding names the conversation, whose session on this replica may
	// lend the tool.
	Binding   string         `json:"binding,omitempty"`
	SessionID string         `json:"sessionId"`
	RunID     string         `json:"runId"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	Iteration int            `json:"iteration,omitempty"`
	Call      llm.ToolCall   `json:"call"`
	// Declined, when set, is what the model is told of a call a person
	// declined: the activity does not run the tool, only tells of it.
	Declined string `json:"declined,omitempty"`
}

// ToolOutput is a tool activity's result: the tool's, and why it is an
// error when it is one (the classes of event.ToolEnd).
type ToolOutput struct {
	tool.Result
	ErrorClass string `json:"errorClass,omitempty"`
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
	SessionID  string         `json:"sessionId"`
	TurnID     string         `json:"turnId"`
	Identity   *tool.Identity `json:"identity,omitempty"`
	Ask        *Ask           `json:"ask,omitempty"`
	Outcome    string         `json:"outcome,omitempty"`
	Problem    string         `json:"problem,omitempty"`
	Iterations int            `json:"iterations"`
	Took       time.Duration  `json:"took"`
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
	// iter counts the turn's model calls; since and segment are when the
	// current stretch (the start, or the last decision) began and its
	// model calls, for the turn's marks.
	iter    int
	since   time.Time
	segment int
}

// TurnWorkflow is the turn loop: model, tool calls, model … until an
// answer, an interrupt or the iteration bound; a check-in waits for the
// decision signal. It is deterministic: everything it learns comes
// through activities and signals, recorded in the history.
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

	res := runLoop(tctx, in, st)
	res.Steps, res.AskedAt = st.steps, st.askedAt

	// The turn is committed to the store even when it was interrupted: a
	// context of its own, since tctx may be cancelled.
	rctx := workflow.WithActivityOptions(ctx, recordOptions())
	if err := workflow.ExecuteActivity(rctx, recordActivity, RecordInput{Binding: in.Binding, TurnID: in.TurnID,
		Identity: in.Identity, Added: res.Added, Done: true}).Get(rctx, nil); err != nil {
		res.Outcome, res.Problem = "failed", "the turn could not be saved: "+err.Error()
	}
	mark(ctx, in, st, MarkInput{Outcome: res.Outcome, Problem: res.Problem})
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

// generate runs one model call: on the session's replica while it takes
// them (so its caller sees the text as it comes), else on any replica.
func generate(ctx workflow.Context, in TurnInput, st *turnState, req ModelInput) (llm.Response, error) {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: in.ModelTimeout,
		HeartbeatTimeout:    in.Heartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second, MaximumAttempts: in.ModelAttempts},
	}
	var resp llm.Response
	if in.PinnedStart > 0 && !st.pinnedGone {
		pinned := opts
		pinned.TaskQueue, pinned.ScheduleToStartTimeout = in.ToolQueue, in.PinnedStart
		pctx := workflow.WithActivityOptions(ctx, pinned)
		err := workflow.ExecuteActivity(pctx, modelActivity, req).Get(pctx, &resp)
		var te *temporal.TimeoutError
		if err == nil || !errors.As(err, &te) || te.TimeoutType() != enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
			return resp, err
		}
		st.pinnedGone = true
	}
	sctx := workflow.WithActivityOptions(ctx, opts)
	err := workflow.ExecuteActivity(sctx, modelActivity, req).Get(sctx, &resp)
	return resp, err
}

// runLoop runs the model and tools until the turn ends. Added holds the
// messages through the last complete exchange, so a stored conversation
// never ends with a tool call that has no result.
func runLoop(ctx workflow.Context, in TurnInput, st *turnState) TurnResult {
	msgs := append(append([]llm.Message(nil), in.Messages...), llm.Message{Role: llm.RoleUser, Content: in.Input})
	base := len(in.Messages)
	res := TurnResult{Outcome: "failed"}
	safe := len(msgs)
	added := func() []llm.Message { return append([]llm.Message(nil), msgs[base:safe]...) }
	// What the model sees: the binding's instructions first, when there
	// are some.
	seen := func() []llm.Message {
		if in.Context == nil {
			return msgs
		}
		return append([]llm.Message{*in.Context}, msgs...)
	}

	tctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              in.ToolQueue,
		ScheduleToStartTimeout: in.ToolStart,
		StartToCloseTimeout:    in.ToolTimeout,
		HeartbeatTimeout:       in.Heartbeat,
		// Never run a tool call again on our own: its side effects may
		// have happened.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	asks := 0
	for range in.MaxIterations {
		if st.interrupted {
			res.Outcome, res.Added = "interrupted", added()
			return res
		}
		st.iter++
		st.segment++
		resp, err := generate(ctx, in, st, ModelInput{SessionID: in.SessionID, TurnID: in.TurnID, Identity: in.Identity,
			Iteration: st.iter, System: in.System, Messages: seen(), Tools: in.Tools})
		switch {
		case st.interrupted:
			res.Outcome, res.Added = "interrupted", added()
			return res
		case err != nil:
			res.Problem, res.Added = "the model call failed: "+cause(err), added()
			return res
		}
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
		if resp.Text != "" {
			st.steps = append(st.steps, Step{Iteration: st.iter, Text: resp.Text})
		}
		if len(resp.ToolCalls) == 0 {
			safe = len(msgs)
			res.Outcome, res.Answer, res.Added = "completed", resp.Text, added()
			return res
		}
		for _, c := range resp.ToolCalls {
			step := Step{Iteration: st.iter, Tool: c.Name, CallID: c.ID}
			var r ToolOutput
			if isCheckIn(in.CheckIns, c.Name) {
				asks++
				ask := &Ask{ID: fmt.Sprintf("%s.ask%d", in.TurnID, asks), Tool: c.Name, CallID: c.ID,
					Prompt: fmt.Sprintf("The agent wants to call %s with %s. Go ahead?", c.Name, clip(string(c.Args), 2000))}
				rctx := workflow.WithActivityOptions(ctx, recordOptions())
				if err := workflow.ExecuteActivity(rctx, recordActivity, RecordInput{Binding: in.Binding, TurnID: in.TurnID,
					Identity: in.Identity, Ask: ask}).Get(rctx, nil); err != nil && !st.interrupted {
					res.Problem, res.Added = "the pause could not be saved: "+cause(err), added()
					return res
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
					res.Outcome, res.Added = "interrupted", added()
					return res
				}
				if d := st.decisions[ask.ID]; !d.Approve {
					r.IsError, r.ErrorClass = true, "declined"
					r.Content = "A person declined this call; it did not run."
					if d.Note != "" {
						r.Content += " Their note: " + d.Note
					}
					// Not run, but told on the session's replica as native
					// turns tell a declined call (its events, its outputs).
					_ = workflow.ExecuteActivity(pinnedOnce(ctx, in), toolActivity, ToolInput{Binding: in.Binding, SessionID: in.SessionID,
						RunID: in.TurnID, Identity: in.Identity, Iteration: st.iter, Call: c, Declined: r.Content}).Get(ctx, nil)
					step.IsError, step.ErrorClass = true, r.ErrorClass
					st.steps = append(st.steps, step)
					msgs = append(msgs, toolMessage(c, r.Result))
					continue
				}
			}
			err := workflow.ExecuteActivity(tctx, toolActivity, ToolInput{Binding: in.Binding, SessionID: in.SessionID, RunID: in.TurnID,
				Identity: in.Identity, Iteration: st.iter, Call: c}).Get(tctx, &r)
			if err != nil {
				if st.interrupted {
					res.Outcome, res.Added = "interrupted", added()
					return res
				}
				r = ToolOutput{Result: tool.Result{IsError: true, Content: lostText(err, in)}, ErrorClass: "lost"}
				var ae *temporal.ApplicationError
				if errors.As(err, &ae) {
					r.ErrorClass = "tool_error"
				}
			}
			step.IsError, step.ErrorClass = r.IsError, r.ErrorClass
			st.steps = append(st.steps, step)
			msgs = append(msgs, toolMessage(c, r.Result))
		}
		safe = len(msgs)
	}
	res.Problem = fmt.Sprintf("the turn reached its bound of %d model calls; ask for less, or raise MaxIterations", in.MaxIterations)
	res.Added = added()
	return res
}

func toolMessage(c llm.ToolCall, r tool.Result) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Content: r.Content, IsError: r.IsError}
}

// lostText tells the model what became of a tool call that did not come
// back, without claiming to know whether it took effect.
func lostText(err error, in TurnInput) string {
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		switch te.TimeoutType().String() {
		case "ScheduleToStart":
			return fmt.Sprintf("This tool call was lost before it started: the replica holding this conversation's live sessions did not take it within %s. It did not run and will not be retried; its live state (interpreter variables, processes, files) may be gone.", in.ToolStart)
		case "Heartbeat":
			return fmt.Sprintf("This tool call was lost while it ran: the worker running it stopped answering (no heartbeat for %s). It may or may not have taken effect and will not be re-run; the live state it used (interpreter variables, processes, files) may be gone. Check before repeating it.", in.Heartbeat)
		case "StartToClose":
			return fmt.Sprintf("This tool call did not finish within %s and was abandoned; it may or may not have taken effect and will not be re-run.", in.ToolTimeout)
		}
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return "The tool call failed: " + ae.Error()
	}
	return "This tool call was lost: " + cause(err) + ". It will not be re-run; it may or may not have taken effect."
}

// cause is the innermost message of a Temporal error chain.
func cause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

func isCheckIn(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
