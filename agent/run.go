package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Input is one turn.
type Input struct {
	// Message is what the person said. Required.
	Message string
	// SessionID binds the run to a hosted conversation; empty when there is
	// none. It is caller data, never identity.
	SessionID string
	// Identity is who the caller says it acts for; nil when none. It
	// reaches tools and event meta unchanged and is never synthesised.
	Identity *tool.Identity
	// Conversation continues an earlier one (Result.Conversation). A
	// conversation that recorded an identity is continued only under an
	// equal Identity.
	Conversation *Conversation
	// Tools are extra tools for this run only (a host binding's tools, for
	// example). Their names must not clash with the agent's tools. A pause
	// records their names; pass the same tools to ResumeWith.
	Tools []tool.Tool
	// RunID names the run, when the caller has an id for it already (a
	// host's turn id, so its events and the host's answer name the same
	// run): printable, no spaces, at most 128 bytes, and not the id of a
	// run in flight. Empty: the agent makes one ("run-" and 128 random
	// bits).
	RunID string
	// Progress, if set, hears this run's progress as it happens, whatever
	// the agent's sinks: the events of ProgressTypes, called synchronously
	// on the goroutine that produces them (tool calls that run
	// concurrently report from their own), before the run goes on. Their
	// Meta has the run's ids; Seq and Time are left to a bus to stamp.
	Progress func(event.Event)
}

// ProgressTypes are the events Input.Progress hears: the turn beginning,
// the model's text (streamed deltas, or whole messages), and each tool
// call's start and end.
var ProgressTypes = []event.Type{
	event.TypeTurnStart, event.TypeLLMDelta, event.TypeLLMMessage, event.TypeToolStart, event.TypeToolEnd,
}

// Result is how a turn ended: an answer (Output), or a pause (Paused).
// On an error, only RunID is set.
type Result struct {
	RunID  string
	Output string
	// Paused is set when a tool waits for a person; resume with the
	// checkpoint. It is not an error.
	Paused *Pause
	// Conversation is the conversation after an answered turn; nil after a
	// pause (the checkpoint holds it) or an error.
	Conversation *Conversation
}

// Pause asks a person a question on behalf of a tool.
type Pause struct {
	Question   string
	ToolName   string
	Checkpoint Checkpoint
}

// Decision is a person's answer to a Pause.
type Decision struct {
	Approve bool
	// Note is told to the model with a decline.
	Note string
}

// ConversationVersion is the version of the Conversation JSON.
const ConversationVersion = 1

// Conversation is plain JSON: the messages so far and the identity they
// were exchanged under. Nothing live is in it.
type Conversation struct {
	Version  int            `json:"version"`
	Identity *tool.Identity `json:"identity,omitempty"`
	Messages []llm.Message  `json:"messages"`
}

// run is the state of one run, owned by the goroutine in Run or Resume.
type run struct {
	a        *Agent
	parent   context.Context // the caller's; teardown detaches from it
	ctx      context.Context // cancelled by the caller or by Shutdown
	cancel   context.CancelCauseFunc
	id       string
	session  string
	identity *tool.Identity
	meta     event.Meta
	extra    []*toolEntry
	defs     []llm.ToolDef
	msgs     []llm.Message
	iter     int // model calls across the run, pauses included
	turnIter int // model calls in this turn
	register tool.Registrar
	hold     tool.Holder
	progress func(event.Event) // Input.Progress
}

// hears reports whether an event of progress type t has anyone to hear
// it: a sink, or the run's Progress.
func (r *run) hears(t event.Type) bool { return r.progress != nil || r.a.wants(t) }

// report sends a progress event to the bus (when a sink wants it) and to
// the run's Progress.
func (r *run) report(e event.Event) {
	if r.a.wants(e.Type) {
		r.a.bus.Export(e)
	}
	if r.progress != nil {
		r.progress(e)
	}
}

// Run runs one turn: the model, the tools it calls, until an answer, an
// error, or a pause.
func (a *Agent) Run(ctx context.Context, in Input) (Result, error) {
	if in.Message == "" {
		return Result{}, ErrEmptyMessage
	}
	var prior []llm.Message
	identity := in.Identity.Clone()
	if c := in.Conversation; c != nil {
		if c.Version != 0 && c.Version != ConversationVersion {
			return Result{}, fmt.Errorf("agent: conversation version %d is not supported (this agent reads version %d)", c.Version, ConversationVersion)
		}
		if c.Identity != nil && !c.Identity.Equal(in.Identity) {
			return Result{}, ErrIdentityMismatch
		}
		prior = c.Messages
	}
	extra, err := a.extraEntries(in.Tools)
	if err != nil {
		return Result{}, err
	}
	runID := in.RunID
	if runID == "" {
		runID = newID("run-")
	} else if err := checkRunID(runID); err != nil {
		return Result{}, err
	}
	r, err := a.begin(ctx, runID, in.RunID != "", in.SessionID, identity, extra)
	if err != nil {
		return Result{}, err
	}
	defer a.finish(r)
	r.progress = in.Progress
	r.msgs = make([]llm.Message, 0, len(prior)+8)
	r.msgs = append(r.msgs, prior...)
	r.msgs = append(r.msgs, llm.Message{Role: llm.RoleUser, Content: in.Message})
	return r.turn(len(in.Message), nil, nil)
}

// ErrRunIDInUse: Input.RunID names a run that is in flight.
var ErrRunIDInUse = errors.New("agent: a run with this id is in flight; give each run its own id, or none")

// checkRunID accepts a caller's run id: 1 to 128 printable bytes, no
// spaces.
func checkRunID(id string) error {
	if len(id) > 128 {
		return errors.New("agent: Input.RunID is longer than 128 bytes")
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			return errors.New("agent: Input.RunID must be printable ASCII without spaces")
		}
	}
	return nil
}

// begin admits a run: refused after Shutdown began, when its session is
// busy, or when its id is a run's in flight.
func (a *Agent) begin(ctx context.Context, runID string, named bool, session string, identity *tool.Identity, extra []*toolEntry) (*run, error) {
	r := &run{a: a, parent: ctx, id: runID, session: session, identity: identity, extra: extra}
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return nil, ErrShutdown
	}
	if named { // the agent's own ids are random: only a caller's can clash
		for other := range a.runs {
			if other.id == runID {
				a.mu.Unlock()
				return nil, ErrRunIDInUse
			}
		}
	}
	if session != "" {
		if _, busy := a.busy[session]; busy {
			a.mu.Unlock()
			return nil, ErrSessionBusy
		}
		a.busy[session] = struct{}{}
	}
	a.inflight++
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	a.runs[r] = struct{}{}
	a.mu.Unlock()

	r.meta = event.Meta{RunID: r.id, SessionID: session, AgentID: a.id}
	if identity != nil {
		r.meta.Tenant, r.meta.Principal = identity.Tenant, identity.Principal
	}
	r.defs = a.defs
	if len(extra) > 0 {
		r.defs = make([]llm.ToolDef, 0, len(a.defs)+len(extra))
		r.defs = append(r.defs, a.defs...)
		for _, e := range extra {
			r.defs = append(r.defs, llm.ToolDef{Name: e.spec.Name, Description: e.spec.Description, InputSchema: e.spec.InputSchema})
		}
	}
	r.register = r.registerTeardown
	r.hold = r.holdSession
	return r, nil
}

// finish releases what begin took. A run that ends after Shutdown already
// fired everything fires again, so nothing it registered late is left.
func (a *Agent) finish(r *run) {
	r.cancel(nil)
	a.mu.Lock()
	delete(a.runs, r)
	if r.session != "" {
		delete(a.busy, r.session)
	}
	a.inflight--
	if a.closing && a.inflight == 0 && a.drained != nil {
		close(a.drained)
		a.drained = nil
	}
	late := a.fired
	a.mu.Unlock()
	if late {
		if t := a.tier.Load(); t != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.parent), a.teardown)
			t.FireShutdown(ctx)
			cancel()
		}
	}
}

// registerTeardown is the door's registrar: it builds the tier on first
// use and announces the session with the run's meta.
func (r *run) registerTeardown(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
	out := r.a.tierFor().Register(o, cleanup, opt)
	e := tool.SessionEvent(o, opt, out)
	e.Meta = r.meta
	r.a.bus.Export(e)
	return out
}

// holdSession is the door's holder: a tool pins the session a call uses,
// or reserves room for a new one. Waiting for room, and a refusal, are
// announced with the run's meta.
func (r *run) holdSession(ctx context.Context, o toolsession.Origin, opt toolsession.Options) (*toolsession.Lease, error) {
	l, err := r.a.tierFor().Hold(ctx, o, opt)
	if e, ok := tool.CapacityEvent(o, opt, l, err); ok {
		e.Meta = r.meta
		r.a.bus.Export(e)
	}
	return l, err
}

// turn runs the loop (after settling a resumed batch) and handles how it
// ended.
func (r *run) turn(messageChars int, b *batch, d *Decision) (Result, error) {
	a := r.a
	start := time.Now()
	if r.hears(event.TypeTurnStart) {
		r.report(event.Event{Type: event.TypeTurnStart, Meta: r.meta,
			Payload: &event.TurnStart{Resumed: b != nil, MessageChars: messageChars, Tools: len(r.defs)}})
	}
	if b != nil && d != nil && a.wants(event.TypePauseResume) {
		c := b.calls[b.waiting[0].Index]
		a.bus.Export(event.Event{Type: event.TypePauseResume, Meta: r.meta,
			Payload: &event.PauseResume{Tool: c.Name, ToolCallID: r.doorID(c.ID), Approved: d.Approve}})
	}
	out, p, err := r.loop(b, d)
	end := &event.TurnEnd{Iterations: r.turnIter}
	switch {
	case p != nil:
		end.Outcome = event.OutcomePaused
		if a.wants(event.TypePauseRequest) {
			w := p.Checkpoint.Waiting[0]
			a.bus.Export(event.Event{Type: event.TypePauseRequest, Meta: r.meta,
				Payload: &event.PauseRequest{Tool: p.ToolName, ToolCallID: r.doorID(r.msgs[len(r.msgs)-1].ToolCalls[w.Index].ID)}})
		}
	case err != nil:
		// A terminal: the run's sessions close, even when it was cancelled.
		a.fireRun(r.parent, r.id)
		end.Outcome = event.OutcomeError
		class := errorClass(err)
		if r.ctx.Err() != nil {
			end.Outcome = event.OutcomeCancelled
			err = fmt.Errorf("agent: run %s was cancelled: %w", r.id, context.Cause(r.ctx))
			class = "cancelled"
		}
		end.Error = err.Error()
		a.emit(event.TypeFatal, &event.Fatal{Where: "agent", Error: err.Error(), ErrorClass: class}, r.meta)
	default:
		a.fireRun(r.parent, r.id)
		end.Outcome = event.OutcomeAnswer
	}
	end.DurationMs = event.Ms(time.Since(start))
	a.emit(event.TypeTurnEnd, end, r.meta)
	switch {
	case p != nil:
		return Result{RunID: r.id, Paused: p}, nil
	case err != nil:
		return Result{RunID: r.id}, err
	}
	return Result{RunID: r.id, Output: out, Conversation: &Conversation{
		Version: ConversationVersion, Identity: r.identity.Clone(), Messages: r.msgs}}, nil
}

func errorClass(err error) string {
	switch {
	case errors.Is(err, ErrMaxIterations):
		return "max_iterations"
	case errors.Is(err, ErrShutdown):
		return "shutdown"
	case errors.Is(err, toolsession.ErrCapacity):
		return "capacity"
	}
	return "model"
}

// loop calls the model until it answers without tool calls. A resumed run
// first settles the batch it paused in.
func (r *run) loop(b *batch, d *Decision) (string, *Pause, error) {
	if b != nil {
		if p, err := r.settle(b, d); p != nil || err != nil {
			return "", p, err
		}
	}
	for {
		if r.iter >= r.a.maxIter {
			return "", nil, fmt.Errorf("%w of %d model calls (Options.MaxIterations) without an answer; raise the limit or check why the model keeps calling tools",
				ErrMaxIterations, r.a.maxIter)
		}
		if err := r.ctx.Err(); err != nil {
			return "", nil, err
		}
		r.iter++
		r.turnIter++
		resp, err := r.generate()
		if err != nil {
			return "", nil, fmt.Errorf("agent: the model failed: %w", err)
		}
		calls := normalizeCalls(resp.ToolCalls, r.iter)
		r.msgs = append(r.msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: calls})
		if len(calls) == 0 {
			return resp.Text, nil, nil
		}
		b := r.start(calls)
		if b.fatal != nil {
			return "", nil, b.fatal
		}
		if p, err := r.settle(b, nil); p != nil || err != nil {
			return "", p, err
		}
	}
}

// generate calls the model once, streaming deltas to the bus when the
// model can stream.
func (r *run) generate() (llm.Response, error) {
	a := r.a
	req := llm.Request{System: a.system, Messages: r.msgs[:len(r.msgs):len(r.msgs)], Tools: r.defs[:len(r.defs):len(r.defs)]}
	if a.wants(event.TypeLLMStart) {
		a.bus.Export(event.Event{Type: event.TypeLLMStart, Meta: r.meta,
			Payload: &event.LLMStart{Model: a.modelName, Iteration: r.iter, Messages: len(req.Messages), Tools: len(req.Tools)}})
	}
	start := time.Now()
	var resp llm.Response
	var err error
	if s, ok := a.model.(llm.Streamer); ok {
		resp, err = r.stream(s, req)
	} else {
		resp, err = a.model.Generate(r.ctx, req)
	}
	if a.wants(event.TypeLLMEnd) {
		p := &event.LLMEnd{Model: a.modelName, Iteration: r.iter, DurationMs: event.Ms(time.Since(start)),
			InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
			StopReason: string(resp.StopReason), ToolCalls: len(resp.ToolCalls)}
		if resp.Model != "" {
			p.Model = resp.Model
		}
		if err != nil {
			p.Error = err.Error()
		}
		a.bus.Export(event.Event{Type: event.TypeLLMEnd, Meta: r.meta, Payload: p})
	}
	if err == nil && resp.Text != "" && r.hears(event.TypeLLMMessage) {
		r.report(event.Event{Type: event.TypeLLMMessage, Meta: r.meta,
			Payload: &event.LLMMessage{Iteration: r.iter, Role: string(llm.RoleAssistant), Content: resp.Text}})
	}
	return resp, err
}

func (r *run) stream(s llm.Streamer, req llm.Request) (llm.Response, error) {
	deltas := r.hears(event.TypeLLMDelta)
	var text strings.Builder
	var calls []llm.ToolCall
	for c, err := range s.Stream(r.ctx, req) {
		if err != nil {
			return llm.Response{}, err
		}
		if c.Done != nil {
			return *c.Done, nil
		}
		if c.Text != "" {
			text.WriteString(c.Text)
			if deltas {
				r.report(event.Event{Type: event.TypeLLMDelta, Meta: r.meta,
					Payload: &event.LLMDelta{Iteration: r.iter, Text: c.Text}})
			}
		}
		if c.ToolCall != nil {
			calls = append(calls, *c.ToolCall)
		}
	}
	if err := r.ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	if text.Len() == 0 && len(calls) == 0 {
		return llm.Response{}, llm.ErrEmptyStream
	}
	resp := llm.Response{Text: text.String(), ToolCalls: calls, StopReason: llm.StopEnd}
	if len(calls) > 0 {
		resp.StopReason = llm.StopToolUse
	}
	return resp, nil
}

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

// batch is the tool calls of one model response while they settle.
type batch struct {
	calls   []llm.ToolCall
	results []*CheckpointResult // nil until settled
	waiting []CheckpointWait    // calls waiting for a person, by index
	// fatal ends the run: a call found no room for its session.
	fatal error
}

// outcome is what one execution of a tool call came to.
type outcome struct {
	res      *CheckpointResult
	asked    bool
	question string
	// fatal is an error that ends the run rather than one the model is
	// told: every live session was busy (toolsession.ErrCapacity).
	fatal error
}

// start runs the calls that need nobody's approval, concurrently (bounded),
// and queues the rest for a person.
func (r *run) start(calls []llm.ToolCall) *batch {
	b := &batch{calls: calls, results: make([]*CheckpointResult, len(calls))}
	var exec []int
	for i, c := range calls {
		e := r.lookup(c.Name)
		switch {
		case e == nil:
			b.results[i] = r.refuse(c, unknownTool(c.Name, r.toolNames()), "unknown_tool")
		case e.spec.CheckIn:
			b.waiting = append(b.waiting, CheckpointWait{Index: i, Question: checkInQuestion(c)})
		default:
			exec = append(exec, i)
		}
	}
	outs := make([]outcome, len(calls))
	if len(exec) == 1 {
		i := exec[0]
		outs[i] = r.exec(r.lookup(calls[i].Name), calls[i], nil)
	} else if len(exec) > 1 {
		sem := make(chan struct{}, r.a.maxPar)
		var wg sync.WaitGroup
		for _, i := range exec {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				outs[i] = r.exec(r.lookup(calls[i].Name), calls[i], nil)
			})
		}
		wg.Wait()
	}
	for _, i := range exec {
		if outs[i].fatal != nil && b.fatal == nil {
			b.fatal = outs[i].fatal
		}
		if outs[i].asked {
			b.waiting = append(b.waiting, CheckpointWait{Index: i, Question: outs[i].question, Asked: true})
		} else {
			b.results[i] = outs[i].res
		}
	}
	slices.SortFunc(b.waiting, func(x, y CheckpointWait) int { return x.Index - y.Index })
	return b
}

// settle works through the calls waiting for a person: d answers the
// first; without an answer, the run pauses. When every call has settled,
// the results go back to the conversation in the order the model asked.
func (r *run) settle(b *batch, d *Decision) (*Pause, error) {
	for len(b.waiting) > 0 {
		if err := r.ctx.Err(); err != nil {
			// Cancelled while calls wait: the run ends, and what the calls
			// that asked mid-call opened is closed with them.
			for _, w := range b.waiting {
				if w.Asked {
					r.a.fireCall(r.parent, r.doorID(b.calls[w.Index].ID))
				}
			}
			return nil, err
		}
		if d == nil {
			return r.pause(b), nil
		}
		w := b.waiting[0]
		c := b.calls[w.Index]
		if d.Approve {
			out := r.exec(r.lookup(c.Name), c, d)
			if out.fatal != nil {
				return nil, out.fatal
			}
			if out.asked {
				b.waiting[0] = CheckpointWait{Index: w.Index, Question: out.question, Asked: true}
				d = nil
				continue
			}
			b.results[w.Index] = out.res
		} else {
			if w.Asked {
				r.a.fireCall(r.parent, r.doorID(c.ID))
			}
			msg := "A person declined this call; do not retry it without asking."
			if d.Note != "" {
				msg = "A person declined this call, with this note: " + d.Note
			}
			b.results[w.Index] = r.refuse(c, msg, "declined")
		}
		b.waiting = b.waiting[1:]
		d = nil
	}
	for i, c := range b.calls {
		res := b.results[i]
		r.msgs = append(r.msgs, llm.Message{Role: llm.RoleTool, Content: res.Content, ToolCallID: c.ID, ToolName: c.Name, IsError: res.IsError})
	}
	return nil, nil
}

func (r *run) lookup(name string) *toolEntry {
	for _, e := range r.extra {
		if e.spec.Name == name {
			return e
		}
	}
	return r.a.tools[name]
}

func (r *run) toolNames() []string {
	names := slices.Clone(r.a.toolNames)
	for _, e := range r.extra {
		names = append(names, e.spec.Name)
	}
	return names
}

func unknownTool(name string, have []string) string {
	if len(have) == 0 {
		return fmt.Sprintf("There is no tool named %q, and no tools are available; answer without tools.", name)
	}
	return fmt.Sprintf("There is no tool named %q. The tools are: %s.", name, strings.Join(have, ", "))
}

func checkInQuestion(c llm.ToolCall) string {
	return fmt.Sprintf("Allow the tool %q to run with these arguments?\n%s", c.Name, c.Args)
}

// doorID is the tool-call id tools and the tier see: the run id joined to
// the model's id, so call-scoped keys never meet across runs even when a
// model reuses ids.
func (r *run) doorID(modelID string) string { return r.id + ":" + modelID }

// refuse settles a call that does not run, with a result for the model.
func (r *run) refuse(c llm.ToolCall, content, class string) *CheckpointResult {
	id := r.doorID(c.ID)
	if r.hears(event.TypeToolStart) {
		r.report(event.Event{Type: event.TypeToolStart, Meta: r.meta, Payload: &event.ToolStart{Tool: c.Name, ToolCallID: id, Iteration: r.iter}})
	}
	if r.hears(event.TypeToolEnd) {
		r.report(event.Event{Type: event.TypeToolEnd, Meta: r.meta, Payload: &event.ToolEnd{Tool: c.Name, ToolCallID: id, IsError: true, ErrorClass: class}})
	}
	return &CheckpointResult{Content: content, IsError: true, ErrorClass: class}
}

// exec runs one tool call: validate, call (panics recovered), and close
// its call-scoped sessions when it settles — not when it asks for a
// person.
func (r *run) exec(e *toolEntry, c llm.ToolCall, d *Decision) outcome {
	a := r.a
	id := r.doorID(c.ID)
	if r.hears(event.TypeToolStart) {
		r.report(event.Event{Type: event.TypeToolStart, Meta: r.meta, Payload: &event.ToolStart{Tool: c.Name, ToolCallID: id, Iteration: r.iter}})
	}
	start := time.Now()
	var res *CheckpointResult
	var capErr error
	if err := e.valid.Validate(c.Args); err != nil {
		res = &CheckpointResult{Content: err.Error(), IsError: true, ErrorClass: "invalid_arguments"}
	} else {
		ctx := r.ctx
		if d != nil {
			ctx = context.WithValue(ctx, decisionKey{}, *d)
		}
		call := tool.NewCall(c.Name, id, r.id, r.session, r.identity.Clone(), allScopes(), r.register).
			WithEvents(r.toolEvent).WithHolder(r.hold)
		out, err, panicked := invoke(ctx, e.tool, call, c.Args)
		var ask *CheckInRequest
		switch {
		case panicked != nil:
			res = &CheckpointResult{Content: fmt.Sprintf("The tool %s failed unexpectedly (it panicked): %v", c.Name, panicked), IsError: true, ErrorClass: "panic"}
			a.emit(event.TypeToolPanic, &event.ToolPanic{Tool: c.Name, ToolCallID: id, Panic: clip(fmt.Sprint(panicked), 500)}, r.meta)
		case errors.As(err, &ask):
			return outcome{asked: true, question: fmt.Sprintf("The tool %q asks: %s", c.Name, ask.Question)}
		case errors.Is(err, toolsession.ErrCapacity):
			// Not the model's to fix: the run ends, and its caller (a host
			// answering 429) can tell the person to retry.
			capErr = fmt.Errorf("agent: tool %s could not open a session: %w", c.Name, err)
			res = &CheckpointResult{Content: capErr.Error(), IsError: true, ErrorClass: "capacity"}
		case err != nil:
			class := "tool_error"
			if tool.IsArgumentError(err) {
				class = "invalid_arguments"
			}
			res = &CheckpointResult{Content: fmt.Sprintf("The tool %s failed: %v", c.Name, err), IsError: true, ErrorClass: class}
		default:
			res = &CheckpointResult{Content: out.Content, IsError: out.IsError}
			if out.IsError {
				res.ErrorClass = "tool_error"
			}
		}
	}
	took := time.Since(start)
	a.fireCall(r.parent, id)
	if r.hears(event.TypeToolEnd) {
		r.report(event.Event{Type: event.TypeToolEnd, Meta: r.meta, Payload: &event.ToolEnd{Tool: c.Name, ToolCallID: id,
			DurationMs: event.Ms(took), IsError: res.IsError, ErrorClass: res.ErrorClass}})
	}
	return outcome{res: res, fatal: capErr}
}

func invoke(ctx context.Context, t tool.Tool, c *tool.Call, args json.RawMessage) (res tool.Result, err error, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			panicked = v
		}
	}()
	res, err = t.Call(ctx, c, args)
	return res, err, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func allScopes() []toolsession.Scope {
	return []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown}
}

// toolEvent carries an event a tool sends through tool.Call.Emit to the
// bus, stamped with this run's meta where the tool left it empty.
func (r *run) toolEvent(e event.Event) {
	if !r.a.wants(e.Type) {
		return
	}
	if e.Meta.AgentID == "" {
		e.Meta.AgentID = r.meta.AgentID
	}
	r.a.bus.Export(e)
}
