package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Executor carries out the steps of a turn that [Loop] decides: model
// calls, tool calls, and what a durable executor must own besides (the
// clock, how tool calls fan out, whether the turn must stop). The loop
// calls it from one goroutine — in a durable executor, one workflow
// coroutine — never concurrently, and decides everything else itself, so
// its decisions are the same wherever it runs and however often it is
// replayed.
//
// An [*Agent] runs its turns on an in-memory executor; provider/durable
// runs them as Temporal workflows whose steps are activities.
type Executor interface {
	// Model makes one model call on the conversation so far; the
	// executor adds the system prompt and the tools. The response's
	// Model names the model that answered (or the configured one), also
	// when the call failed.
	Model(c ModelCall) (llm.Response, error)
	// Tools carries out tool calls of one model response, side by side
	// where it can (bounded), and returns one outcome per call in the
	// same order. A call with Refused set does not run: the executor
	// tells of it (tool.Invoke does) and closes its call scope. The
	// executor must not keep calls; the loop reads the outcomes before
	// its next call, so an executor may reuse their slice.
	Tools(calls []ToolCall) []tool.Outcome
	// Lookup reports whether the turn offers a tool of this name, and
	// whether every call of it waits for a person first
	// (Spec().CheckIn).
	Lookup(name string) (checkIn, ok bool)
	// ToolNames lists the tools the turn offers, to tell a model that
	// named one that does not exist.
	ToolNames() []string
	// Stopped reports why the turn must stop now (its caller cancelled
	// it, a shutdown, an interrupt); nil while it may go on.
	Stopped() error
	// Now reads the executor's clock.
	Now() time.Time
}

// ModelCall is one model call the loop asks for.
type ModelCall struct {
	// Iteration counts the run's model calls, this one included.
	Iteration int
	// Messages is the conversation so far. The executor must not keep or
	// change it.
	Messages []llm.Message
	// WrapUp is set on the last call of a turn that crossed its limit
	// ([Limiter]): the executor still describes the tools (the
	// conversation holds their calls) but asks the model to call none
	// (llm.Request.NoToolCalls). Any call the model asks for anyway is
	// dropped.
	WrapUp bool
}

// Limiter is what an executor implements when its turn runs under a
// limit its caller gave (a host's budget). The loop asks it before each
// model call after the first, with what the turn used so far; a non-empty
// answer names the limit the turn crossed. The step under way has
// finished by then; the loop makes one more model call with tools
// withheld, telling the model why in a message of its own, and ends the
// turn with that call's answer (End.Limited says which limit). An
// executor that does not implement it runs its turns unlimited.
type Limiter interface {
	Limit(used llm.TurnUsage) (crossed string)
}

// ToolCall is one tool call the loop asks for.
type ToolCall struct {
	Call llm.ToolCall `json:"call"`
	// DoorID is the tool call id the tool and the teardown tier see: the
	// run id joined to the model's id, so call-scoped keys never meet
	// across runs even when a model reuses ids.
	DoorID string `json:"doorId"`
	// Iteration is the model call that asked for it.
	Iteration int `json:"iteration"`
	// Approval is set when the call runs because a person approved it.
	Approval *tool.Approval `json:"approval,omitempty"`
	// Refused, when set, answers a call that does not run (an unknown
	// tool, a call a person declined).
	Refused *tool.Outcome `json:"refused,omitempty"`
}

// State is where a run stands: its conversation, how many model calls it
// made, and, while the tool calls of the last model response settle, what
// each came to and which wait for a person. It is plain data: a
// [Checkpoint] carries it between processes, a durable executor keeps it
// in its workflow.
type State struct {
	RunID     string
	Iteration int
	// Messages end, while calls settle, with the assistant message that
	// asked for them.
	Messages []llm.Message
	// Results has one entry per call of that message, nil while it waits;
	// Waiting lists the waiting calls in order, the first being the one a
	// person is asked about.
	Results []*CheckpointResult
	Waiting []CheckpointWait
}

// Asking is the call a paused state asks a person about: the question,
// the tool, and the model's id of the call.
func (st *State) Asking() (question, toolName, callID string) {
	if len(st.Waiting) == 0 || len(st.Messages) == 0 {
		return "", "", ""
	}
	w := st.Waiting[0]
	c := st.Messages[len(st.Messages)-1].ToolCalls[w.Index]
	return w.Question, c.Name, c.ID
}

// End is how a stretch of the loop ended: an answer, a pause (the state
// waits for a person), an error, or a cancellation.
type End struct {
	// Outcome is event.OutcomeAnswer, OutcomePaused, OutcomeError or
	// OutcomeCancelled.
	Outcome string
	// Output is the answer.
	Output string
	// Err is why the run failed or stopped, and Class its failure class
	// (an event.Class constant).
	Err   error
	Class string
	// Iterations counts this stretch's model calls.
	Iterations int
	// Limited names the limit the turn crossed ([Limiter]); its answer
	// then came from a wrap-up call without tools.
	Limited string
	// Usage is what this stretch used.
	Usage llm.TurnUsage
	// Unsettled are the door ids of calls that asked a person mid-call
	// and whose run stopped before the answer: their call-scoped sessions
	// are still open, and the caller closes them.
	Unsettled []string
}

// Loop runs a turn from st over x until the model answers, the run fails
// or is stopped, or a call waits for a person; st is left where the run
// stands. When st has calls waiting (a resumed pause), d answers the
// first of them. maxIterations bounds st.Iteration, across pauses.
//
// The loop owns what a turn promises wherever it runs: tool calls of one
// response run side by side and go back to the model in the order it
// asked; a tool that waits for approval, or asks mid-call, pauses the run
// (one question at a time); a decline is told to the model; every tool
// failure is a result the model reads, except a full tool-session tier,
// which ends the run; failures are sorted into classes; and usage is
// counted.
func Loop(x Executor, st *State, d *Decision, maxIterations int) End {
	l := looper{x: x, st: st, max: maxIterations}
	start := x.Now()
	out, err := l.run(d)
	e := l.end
	e.Usage.Duration = x.Now().Sub(start)
	switch {
	case err == nil && len(st.Waiting) > 0:
		e.Outcome = event.OutcomePaused
	case err == nil:
		e.Outcome, e.Output = event.OutcomeAnswer, out
	default:
		e.Outcome, e.Err, e.Class = event.OutcomeError, err, errorClass(err)
		if stop := x.Stopped(); stop != nil {
			e.Outcome, e.Class = event.OutcomeCancelled, tool.ClassCancelled
			e.Err = fmt.Errorf("agent: run %s was cancelled: %w", st.RunID, stop)
		}
	}
	return e
}

func errorClass(err error) string {
	switch {
	case errors.Is(err, ErrMaxIterations):
		return tool.ClassMaxIterations
	case errors.Is(err, ErrShutdown):
		return tool.ClassShutdown
	case errors.Is(err, toolsession.ErrCapacity):
		return tool.ClassCapacity
	}
	return tool.ClassModel
}

type looper struct {
	x   Executor
	st  *State
	max int
	end End
	// reqs is reused from one model response to the next: the executor
	// does not keep what it is given.
	reqs []ToolCall
}

// run calls the model until it answers without tool calls. A resumed
// state first settles the calls it paused in.
func (l *looper) run(d *Decision) (string, error) {
	st := l.st
	if len(st.Waiting) > 0 {
		if err := l.settle(d); err != nil || len(st.Waiting) > 0 {
			return "", err
		}
	}
	for {
		if st.Iteration >= l.max {
			return "", fmt.Errorf("%w of %d model calls (Options.MaxIterations) without an answer; raise the limit or check why the model keeps calling tools",
				ErrMaxIterations, l.max)
		}
		if err := l.x.Stopped(); err != nil {
			return "", err
		}
		if why := l.limited(); why != "" {
			return l.wrapUp(why)
		}
		st.Iteration++
		l.end.Iterations++
		n := len(st.Messages)
		resp, err := l.x.Model(ModelCall{Iteration: st.Iteration, Messages: st.Messages[:n:n]})
		l.end.Usage.CountModel(resp.Model, resp.Usage)
		if err != nil {
			return "", fmt.Errorf("agent: the model failed: %w", err)
		}
		calls := normalizeCalls(resp.ToolCalls, st.Iteration)
		st.Messages = append(st.Messages, llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: calls})
		if len(calls) == 0 {
			return resp.Text, nil
		}
		if err := l.start(calls); err != nil {
			return "", err
		}
		if err := l.settle(nil); err != nil || len(st.Waiting) > 0 {
			return "", err
		}
	}
}

// limited asks the executor's Limiter, once the turn used something,
// whether it crossed its limit.
func (l *looper) limited() string {
	lm, ok := l.x.(Limiter)
	if !ok || l.end.Usage.ModelCalls == 0 && len(l.end.Usage.ToolCalls) == 0 {
		return ""
	}
	return lm.Limit(l.end.Usage)
}

// wrapUp ends a turn that crossed its limit: the model is told why and
// asked, with tools withheld, for its answer from what it has.
func (l *looper) wrapUp(why string) (string, error) {
	st := l.st
	l.end.Limited = why
	st.Iteration++
	l.end.Iterations++
	st.Messages = append(st.Messages, llm.Message{Role: llm.RoleUser, Content: wrapUpNote(why)})
	n := len(st.Messages)
	resp, err := l.x.Model(ModelCall{Iteration: st.Iteration, Messages: st.Messages[:n:n], WrapUp: true})
	l.end.Usage.CountModel(resp.Model, resp.Usage)
	if err != nil {
		return "", fmt.Errorf("agent: the model failed on the wrap-up call after the turn crossed its limit (%s): %w", why, err)
	}
	st.Messages = append(st.Messages, llm.Message{Role: llm.RoleAssistant, Content: resp.Text})
	return resp.Text, nil
}

// wrapUpNote tells the model why its tools are gone.
func wrapUpNote(why string) string {
	return "[from the host, not the person] This turn has crossed its limit: " + why +
		". No more tool calls can run in it. Answer now with what you have, and say what is left undone."
}

// start runs the calls that need nobody's approval (the executor runs
// them side by side) and queues the rest for a person.
func (l *looper) start(calls []llm.ToolCall) error {
	st := l.st
	st.Results = make([]*CheckpointResult, len(calls))
	st.Waiting = nil
	reqs := l.reqs[:0]
	for i, c := range calls {
		checkIn, ok := l.x.Lookup(c.Name)
		switch {
		case !ok:
			reqs = append(reqs, l.call(c, nil, refusal(unknownTool(c.Name, l.x.ToolNames()), tool.ClassUnknownTool)))
		case checkIn:
			st.Waiting = append(st.Waiting, CheckpointWait{Index: i, Question: checkInQuestion(c)})
		default:
			reqs = append(reqs, l.call(c, nil, nil))
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	l.reqs = reqs
	outs := l.x.Tools(reqs)
	var fatal error
	held := len(st.Waiting) // the calls waiting for approval, in order
	for i, j, w := 0, 0, 0; i < len(calls); i++ {
		if w < held && st.Waiting[w].Index == i {
			w++
			continue
		}
		l.count(&reqs[j])
		o := &outs[j]
		l.sandbox(o)
		j++
		if o.Asked != "" {
			st.Waiting = append(st.Waiting, CheckpointWait{Index: i, Question: asks(calls[i].Name, o.Asked), Asked: true})
			continue
		}
		if fatal == nil {
			fatal = endsRun(calls[i], o)
		}
		st.Results[i] = result(o)
	}
	slices.SortFunc(st.Waiting, func(x, y CheckpointWait) int { return x.Index - y.Index })
	return fatal
}

// settle works through the calls waiting for a person: d answers the
// first; without an answer, the run pauses (st keeps them waiting). When
// every call has settled, the results go back to the conversation in the
// order the model asked.
func (l *looper) settle(d *Decision) error {
	st := l.st
	calls := st.Messages[len(st.Messages)-1].ToolCalls
	for len(st.Waiting) > 0 {
		if err := l.x.Stopped(); err != nil {
			// Stopped while calls wait: what the calls that asked mid-call
			// opened closes with the run.
			for _, w := range st.Waiting {
				if w.Asked {
					l.end.Unsettled = append(l.end.Unsettled, doorID(st.RunID, calls[w.Index].ID))
				}
			}
			return err
		}
		if d == nil {
			return nil
		}
		w := st.Waiting[0]
		c := calls[w.Index]
		req := l.call(c, &tool.Approval{Note: d.Note}, nil)
		if !d.Approve {
			req = l.call(c, nil, refusal(declined(d.Note), tool.ClassDeclined))
		}
		d = nil
		l.count(&req)
		o := &l.x.Tools([]ToolCall{req})[0]
		l.sandbox(o)
		if o.Asked != "" {
			st.Waiting[0] = CheckpointWait{Index: w.Index, Question: asks(c.Name, o.Asked), Asked: true}
			continue
		}
		if err := endsRun(c, o); err != nil {
			return err
		}
		st.Results[w.Index] = result(o)
		st.Waiting = st.Waiting[1:]
	}
	for i, c := range calls {
		res := st.Results[i]
		st.Messages = append(st.Messages, llm.Message{Role: llm.RoleTool, Content: res.Content, ToolCallID: c.ID, ToolName: c.Name, IsError: res.IsError})
	}
	st.Results, st.Waiting = nil, nil
	return nil
}

func (l *looper) call(c llm.ToolCall, a *tool.Approval, refused *tool.Outcome) ToolCall {
	return ToolCall{Call: c, DoorID: doorID(l.st.RunID, c.ID), Iteration: l.st.Iteration, Approval: a, Refused: refused}
}

// count counts a call that ran in the usage.
func (l *looper) count(req *ToolCall) {
	if req.Refused == nil {
		l.end.Usage.CountTool(req.Call.Name)
	}
}

// sandbox counts what a call's sandbox used.
func (l *looper) sandbox(o *tool.Outcome) {
	if sb := o.Result.Sandbox; sb != nil {
		u := &l.end.Usage
		u.SandboxCPU += sb.CPU
		u.SandboxPeakMemory = max(u.SandboxPeakMemory, sb.PeakMemory)
	}
}

// endsRun is the error that ends the run for a call's outcome: a full
// tool-session tier is not the model's to fix, so its caller (a host
// answering 429) can tell the person to retry.
func endsRun(c llm.ToolCall, o *tool.Outcome) error {
	if o.Class != tool.ClassCapacity {
		return nil
	}
	if o.Err != nil && errors.Is(o.Err, toolsession.ErrCapacity) {
		return fmt.Errorf("agent: tool %s could not open a session: %w", c.Name, o.Err)
	}
	return fmt.Errorf("agent: tool %s could not open a session (%s): %w", c.Name, o.Result.Content, toolsession.ErrCapacity)
}

func result(o *tool.Outcome) *CheckpointResult {
	return &CheckpointResult{Content: o.Result.Content, IsError: o.Result.IsError, ErrorClass: o.Class}
}

func refusal(content, class string) *tool.Outcome {
	return &tool.Outcome{Result: tool.Result{Content: content, IsError: true}, Class: class}
}

func declined(note string) string {
	if note != "" {
		return "A person declined this call, with this note: " + note
	}
	return "A person declined this call; do not retry it without asking."
}

func asks(name, question string) string { return fmt.Sprintf("The tool %q asks: %s", name, question) }

func unknownTool(name string, have []string) string {
	if len(have) == 0 {
		return fmt.Sprintf("There is no tool named %q, and no tools are available; answer without tools.", name)
	}
	return fmt.Sprintf("There is no tool named %q. The tools are: %s.", name, strings.Join(have, ", "))
}

// maxQuestionArgs bounds the arguments a check-in question shows: the
// model writes them, and the question is stored and shown to a person.
const maxQuestionArgs = 2000

func checkInQuestion(c llm.ToolCall) string {
	args := string(c.Args)
	if len(args) > maxQuestionArgs {
		cut := maxQuestionArgs
		for cut > 0 && !utf8.RuneStart(args[cut]) {
			cut--
		}
		args = fmt.Sprintf("%s… (%d of %d bytes shown)", args[:cut], cut, len(c.Args))
	}
	return fmt.Sprintf("Allow the tool %q to run with these arguments?\n%s", c.Name, args)
}

// doorID is the tool call id tools and the tier see.
func doorID(runID, modelID string) string { return runID + ":" + modelID }

// normalizeCalls copies the model's calls, giving every call an id unique
// within the response and arguments that are at least {}.
func normalizeCalls(in []llm.ToolCall, iter int) []llm.ToolCall {
	if len(in) == 0 {
		return nil
	}
	out := make([]llm.ToolCall, len(in))
	for i, c := range in {
		if c.ID == "" || slices.ContainsFunc(out[:i], func(o llm.ToolCall) bool { return o.ID == c.ID }) {
			id := "call_" + strconv.Itoa(iter) + "_" + strconv.Itoa(i)
			for taken(in, out[:i], id) {
				id += "x"
			}
			c.ID = id
		}
		switch {
		case len(c.Args) == 0:
			c.Args = json.RawMessage("{}")
		case !json.Valid(c.Args):
			// Kept as a JSON string, so the conversation stays JSON and the
			// validator tells the model its arguments were not an object.
			s, _ := json.Marshal(string(c.Args))
			c.Args = s
		}
		out[i] = c
	}
	return out
}

func taken(in, out []llm.ToolCall, id string) bool {
	has := func(c llm.ToolCall) bool { return c.ID == id }
	return slices.ContainsFunc(in, has) || slices.ContainsFunc(out, has)
}
