package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Limit, if set, is asked before each model call after the first,
	// with what the turn used so far; a non-empty answer names the limit
	// the turn crossed (a host's budget), and the turn ends with one more
	// model call, tools withheld ([Limiter]).
	Limit func(used llm.TurnUsage) (crossed string)
}

// ProgressTypes are the events Input.Progress hears: the turn beginning,
// the model's text (streamed deltas, or whole messages), and each tool
// call's start and end.
var ProgressTypes = []event.Type{
	event.TypeTurnStart, event.TypeLLMDelta, event.TypeLLMMessage, tool.TypeCallStart, tool.TypeCallEnd,
}

// Result is how a turn ended: an answer (Output), or a pause (Paused).
// On an error, only RunID and Usage are set.
type Result struct {
	RunID  string
	Output string
	// Paused is set when a tool waits for a person; resume with the
	// checkpoint. It is not an error.
	Paused *Pause
	// Conversation is the conversation after an answered turn; nil after a
	// pause (the checkpoint holds it) or an error.
	Conversation *Conversation
	// Usage is what this turn used — a resume counts what the resumed run
	// used from the pause on — also when it failed or was cancelled.
	Usage llm.TurnUsage
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

// run is one run in flight, owned by the goroutine in Run or Resume. It
// is the in-memory Executor of the run's Loop.
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
	door     tool.Door
	outs     []tool.Outcome    // reused by Tools from one response to the next
	progress func(event.Event) // Input.Progress
	limit    func(llm.TurnUsage) string
}

// Limit asks the run's Input.Limit (ResumeOptions.Limit); a run without
// one is unlimited.
func (r *run) Limit(used llm.TurnUsage) string {
	if r.limit == nil {
		return ""
	}
	return r.limit(used)
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
	r.progress, r.limit = in.Progress, in.Limit
	st := &State{RunID: runID, Messages: make([]llm.Message, 0, len(prior)+8)}
	st.Messages = append(st.Messages, prior...)
	st.Messages = append(st.Messages, llm.Message{Role: llm.RoleUser, Content: in.Message})
	return r.turn(len(in.Message), st, nil)
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
	r.door = tool.Door{Scopes: allScopes, Register: r.registerTeardown, Hold: r.holdSession, Meta: r.meta,
		Report: r.report, Hears: r.hears, Events: r.toolEvent, Settle: r.settleCall, Asks: true}
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

// turn runs the loop from st (d answers a resumed pause) and handles how
// it ended: the run's sessions close at its terminals, a pause becomes a
// checkpoint, and the turn's events go out.
func (r *run) turn(messageChars int, st *State, d *Decision) (Result, error) {
	a := r.a
	if r.hears(event.TypeTurnStart) {
		r.report(event.Event{Type: event.TypeTurnStart, Meta: r.meta,
			Payload: &event.TurnStart{Resumed: d != nil, MessageChars: messageChars, Tools: len(r.defs)}})
	}
	if d != nil && a.wants(event.TypePauseResume) {
		_, name, id := st.Asking()
		a.bus.Export(event.Event{Type: event.TypePauseResume, Meta: r.meta,
			Payload: &event.PauseResume{Tool: name, ToolCallID: doorID(r.id, id), Approved: d.Approve}})
	}
	end := Loop(r, st, d, a.maxIter)
	for _, id := range end.Unsettled {
		a.fireCall(r.parent, id)
	}
	te := &event.TurnEnd{Iterations: end.Iterations, Outcome: end.Outcome}
	var p *Pause
	switch end.Outcome {
	case event.OutcomePaused:
		p = r.pause(st)
		if a.wants(event.TypePauseRequest) {
			_, name, id := st.Asking()
			a.bus.Export(event.Event{Type: event.TypePauseRequest, Meta: r.meta,
				Payload: &event.PauseRequest{Tool: name, ToolCallID: doorID(r.id, id)}})
		}
	case event.OutcomeAnswer:
		a.fireRun(r.parent, r.id)
	default:
		// A terminal: the run's sessions close, even when it was cancelled.
		a.fireRun(r.parent, r.id)
		te.Error = end.Err.Error()
		a.emit(event.TypeFatal, &event.Fatal{Where: "agent", Error: te.Error, ErrorClass: end.Class}, r.meta)
	}
	te.DurationMs = event.Ms(end.Usage.Duration)
	a.emit(event.TypeTurnEnd, te, r.meta)
	switch {
	case p != nil:
		return Result{RunID: r.id, Paused: p, Usage: end.Usage}, nil
	case end.Err != nil:
		return Result{RunID: r.id, Usage: end.Usage}, end.Err
	}
	return Result{RunID: r.id, Output: end.Output, Usage: end.Usage, Conversation: &Conversation{
		Version: ConversationVersion, Identity: r.identity.Clone(), Messages: st.Messages}}, nil
}

// Model calls the model once, streaming deltas to the bus when the model
// can stream.
func (r *run) Model(c ModelCall) (llm.Response, error) {
	a := r.a
	req := llm.Request{System: a.system, Messages: c.Messages, Tools: r.defs[:len(r.defs):len(r.defs)], NoToolCalls: c.WrapUp}
	if a.wants(event.TypeLLMStart) {
		a.bus.Export(event.Event{Type: event.TypeLLMStart, Meta: r.meta,
			Payload: &event.LLMStart{Model: a.modelName, Iteration: c.Iteration, Messages: len(req.Messages), Tools: len(req.Tools)}})
	}
	timed := a.wants(event.TypeLLMEnd) // the clock is read only for someone
	var start time.Time
	if timed {
		start = time.Now()
	}
	var resp llm.Response
	var err error
	if s, ok := a.model.(llm.Streamer); ok {
		resp, err = r.stream(s, req, c.Iteration)
	} else {
		resp, err = a.model.Generate(r.ctx, req)
	}
	if resp.Model == "" {
		resp.Model = a.modelName
	}
	if timed {
		p := &event.LLMEnd{Model: resp.Model, Iteration: c.Iteration, DurationMs: event.Ms(time.Since(start)),
			InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
			StopReason: string(resp.StopReason), ToolCalls: len(resp.ToolCalls)}
		if err != nil {
			p.Error = err.Error()
		}
		a.bus.Export(event.Event{Type: event.TypeLLMEnd, Meta: r.meta, Payload: p})
	}
	if err == nil && resp.Text != "" && r.hears(event.TypeLLMMessage) {
		r.report(event.Event{Type: event.TypeLLMMessage, Meta: r.meta,
			Payload: &event.LLMMessage{Iteration: c.Iteration, Role: string(llm.RoleAssistant), Content: resp.Text}})
	}
	return resp, err
}

func (r *run) stream(s llm.Streamer, req llm.Request, iter int) (llm.Response, error) {
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
					Payload: &event.LLMDelta{Iteration: iter, Text: c.Text}})
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

// Tools tells of the refused calls first, then runs the others
// concurrently, at most Options.MaxParallelTools at once.
func (r *run) Tools(calls []ToolCall) []tool.Outcome {
	if cap(r.outs) < len(calls) {
		r.outs = make([]tool.Outcome, len(calls))
	}
	outs := r.outs[:len(calls)] // every one is set below
	running := 0
	for i := range calls {
		if calls[i].Refused != nil {
			outs[i] = r.invoke(calls[i])
		} else {
			running++
		}
	}
	if running == 1 {
		for i := range calls {
			if calls[i].Refused == nil {
				outs[i] = r.invoke(calls[i])
			}
		}
		return outs
	}
	sem := make(chan struct{}, r.a.maxPar)
	var wg sync.WaitGroup
	for i := range calls {
		if calls[i].Refused != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outs[i] = r.invoke(calls[i])
		})
	}
	wg.Wait()
	return outs
}

func (r *run) invoke(c ToolCall) tool.Outcome {
	req := tool.Request{Name: c.Call.Name, ToolCallID: c.DoorID, RunID: r.id, SessionID: r.session, Identity: r.identity,
		Args: c.Call.Args, Iteration: c.Iteration, Approval: c.Approval, Refused: c.Refused}
	if e := r.lookup(c.Call.Name); e != nil {
		req.Tool, req.Valid = e.tool, e.valid
	}
	return tool.Invoke(r.ctx, &r.door, req)
}

// Lookup finds a tool among the run's extra tools and the agent's.
func (r *run) Lookup(name string) (checkIn, ok bool) {
	e := r.lookup(name)
	return e != nil && e.spec.CheckIn, e != nil
}

// ToolNames are the agent's tools, then the run's extra ones.
func (r *run) ToolNames() []string {
	names := slices.Clone(r.a.toolNames)
	for _, e := range r.extra {
		names = append(names, e.spec.Name)
	}
	return names
}

// Stopped is why the run's context ended: the caller's cancellation, a
// deadline, or Shutdown (ErrShutdown).
func (r *run) Stopped() error {
	if r.ctx.Err() != nil {
		return context.Cause(r.ctx)
	}
	return nil
}

// Now is the agent's clock.
func (r *run) Now() time.Time { return r.a.now() }

func (r *run) lookup(name string) *toolEntry {
	for _, e := range r.extra {
		if e.spec.Name == name {
			return e
		}
	}
	return r.a.tools[name]
}

// settleCall closes a settled call's call-scoped sessions.
func (r *run) settleCall(doorID string) { r.a.fireCall(r.parent, doorID) }

// allScopes is what the agent's door honours. tool.Invoke gives every
// call its own copy.
var allScopes = []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown}

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
