package tool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/toolsession"
)

// The events of a tool call ([Invoke]) and of the sessions tools hold.
// Each has one payload struct below, sent as a pointer; init registers
// them with package event.
const (
	// A tool call.
	TypeCallStart event.Type = "agentry.tool.start"
	TypeCallEnd   event.Type = "agentry.tool.end"
	// TypePanic: a tool that panicked; the panic became an error result.
	TypePanic event.Type = "agentry.error.tool_panic"

	// Sessions held by tools.
	TypeSessionStarted     event.Type = "agentry.tools.session_started"
	TypeSessionReused      event.Type = "agentry.tools.session_reused"
	TypeSessionClosed      event.Type = "agentry.tools.session_closed"
	TypeSessionCloseFailed event.Type = "agentry.tools.session_close_failed"
	// TypeSessionCapacity: an opener found every live session busy, and
	// either waited for room or was refused.
	TypeSessionCapacity event.Type = "agentry.tools.session_capacity"
)

func init() {
	event.Register(TypeCallStart, func() any { return new(CallStart) })
	event.Register(TypeCallEnd, func() any { return new(CallEnd) })
	event.Register(TypePanic, func() any { return new(Panicked) })
	event.Register(TypeSessionStarted, func() any { return new(SessionOpened) })
	event.Register(TypeSessionReused, func() any { return new(SessionOpened) })
	event.Register(TypeSessionClosed, func() any { return new(SessionClosed) })
	event.Register(TypeSessionCloseFailed, func() any { return new(SessionClosed) })
	event.Register(TypeSessionCapacity, func() any { return new(SessionCapacity) })
}

// Failure classes: why a tool call's result is an error (CallEnd.ErrorClass),
// why a run failed (event.Fatal.ErrorClass), why a tool session failed to close
// (SessionClosed.ErrorClass). Each word is defined here once; the
// doors ([Invoke]), the loop (agent) and the teardown tier's reports
// use these names.
const (
	// A tool call's result.
	ClassInvalidArguments = "invalid_arguments" // the arguments failed the tool's schema or decoding
	ClassToolError        = "tool_error"        // the tool failed, or answered with an error result
	ClassPanic            = "panic"             // the tool (or a cleanup) panicked and was recovered
	ClassUnknownTool      = "unknown_tool"      // the model named a tool the run does not offer
	ClassDeclined         = "declined"          // a person (or a door that cannot ask one) declined the call
	ClassCapacity         = "capacity"          // every live tool session was busy (also ends the run)
	ClassLost             = "lost"              // a durable tool call whose worker went away; never re-run
	ClassCancelled        = "cancelled"         // the call, the run or the cleanup was cancelled

	// A run's failure (besides capacity and cancelled).
	ClassMaxIterations = "max_iterations" // the run reached its model-call bound
	ClassShutdown      = "shutdown"       // the agent shut down under the run
	ClassModel         = "model"          // the model call failed
	ClassStore         = "store"          // a durable turn could not be saved

	// A cleanup's failure (besides panic and cancelled).
	ClassTimeout = "timeout" // the cleanup outran its deadline
	ClassError   = "error"   // the cleanup returned an error
)

// CallStart is sent before a tool runs.
type CallStart struct {
	Tool       string `json:"tool"`
	ToolCallID string `json:"toolCallId"`
	Iteration  int    `json:"iteration"`
	// Args are the call's arguments, for an observer in the same process
	// (the native provider shows them to the person the turn is for).
	// They are never written: an events file or a span does not hold them.
	Args json.RawMessage `json:"-"`
}

// CallEnd is sent after a tool returns, fails or panics.
type CallEnd struct {
	Tool       string  `json:"tool"`
	ToolCallID string  `json:"toolCallId"`
	DurationMs float64 `json:"durationMs"`
	IsError    bool    `json:"isError"`
	// ErrorClass says why IsError: one of the Class constants.
	ErrorClass string `json:"errorClass,omitempty"`
	// Content is what the call returned, for an observer in the same
	// process, like CallStart.Args; never written.
	Content string `json:"-"`
}

// Panicked reports a tool that panicked; the panic became an error result.
type Panicked struct {
	Tool       string `json:"tool"`
	ToolCallID string `json:"toolCallId"`
	Panic      string `json:"panic"`
}

// SessionOpened is the payload of session_started and session_reused.
type SessionOpened struct {
	Tool     string `json:"tool"`
	Scope    string `json:"scope"`
	KeyHash  string `json:"keyHash"`
	RunnerID string `json:"runnerId,omitempty"`
	Label    string `json:"label,omitempty"`
	Calls    int    `json:"calls"`
}

// Capacity outcomes, in SessionCapacity.Outcome.
const (
	CapacityAdmitted = "admitted" // room appeared while it waited
	CapacityRefused  = "refused"  // none did within the bound
)

// SessionCapacity is the payload of session_capacity: a new session
// found all MaxLive live sessions with a call in flight.
type SessionCapacity struct {
	Tool     string  `json:"tool"`
	Scope    string  `json:"scope"`
	KeyHash  string  `json:"keyHash"`
	MaxLive  int     `json:"maxLive"`
	WaitedMs float64 `json:"waitedMs"`
	Outcome  string  `json:"outcome"`
}

// SessionClosed is the payload of session_closed and
// session_close_failed.
type SessionClosed struct {
	Tool       string  `json:"tool"`
	Scope      string  `json:"scope"`
	KeyHash    string  `json:"keyHash"`
	RunnerID   string  `json:"runnerId,omitempty"`
	Label      string  `json:"label,omitempty"`
	Reason     string  `json:"reason"`
	HeldMs     float64 `json:"heldMs"`
	TookMs     float64 `json:"tookMs"`
	Error      string  `json:"error,omitempty"`
	ErrorClass string  `json:"errorClass,omitempty"`
}

// SessionEvent is the event a door emits from inside a call when a tool
// registers a teardown: session_started, or session_reused when it joined
// a session already held. Meta carries the origin's run and session.
func SessionEvent(o toolsession.Origin, opt toolsession.Options, out toolsession.Outcome) event.Event {
	typ := TypeSessionStarted
	if out.Reused {
		typ = TypeSessionReused
	}
	scope := opt.Scope
	if scope == "" {
		scope = toolsession.ScopeRun
	}
	return event.Event{
		Type: typ,
		Payload: &SessionOpened{Tool: o.Tool, Scope: string(scope), KeyHash: out.KeyHash,
			RunnerID: opt.RunnerID, Label: opt.Label, Calls: out.Calls},
		Meta: event.Meta{RunID: o.RunID, SessionID: o.SessionID, Tenant: o.Tenant, Principal: o.Principal},
	}
}

// CapacityEvent is the event a door emits when a Hold met a full tier:
// session_capacity, outcome admitted (it waited, then got room) or refused
// (err matches toolsession.ErrCapacity). ok is false when there is nothing
// to say: the Hold got room at once, or failed for another reason.
func CapacityEvent(o toolsession.Origin, opt toolsession.Options, l *toolsession.Lease, err error) (e event.Event, ok bool) {
	scope := opt.Scope
	if scope == "" {
		scope = toolsession.ScopeRun
	}
	p := &SessionCapacity{Tool: o.Tool, Scope: string(scope)}
	var ce *toolsession.CapacityError
	switch {
	case errors.As(err, &ce):
		p.KeyHash, p.MaxLive, p.WaitedMs, p.Outcome = toolsession.HashKey(opt.Key), ce.MaxLive, event.Ms(ce.Waited), CapacityRefused
	case err == nil && l != nil && l.Queued:
		p.KeyHash, p.MaxLive, p.WaitedMs, p.Outcome = l.KeyHash, l.MaxLive, event.Ms(l.Waited), CapacityAdmitted
	default:
		return event.Event{}, false
	}
	return event.Event{Type: TypeSessionCapacity, Payload: p,
		Meta: event.Meta{RunID: o.RunID, SessionID: o.SessionID, Tenant: o.Tenant, Principal: o.Principal}}, true
}

// CloseEvent is the event for a teardown report: session_closed, or
// session_close_failed with the error and its class. Meta carries the
// origin's run and session, not whatever run is current when it fires.
func CloseEvent(rep toolsession.Report) event.Event {
	p := &SessionClosed{
		Tool: rep.Tool, Scope: string(rep.Scope), KeyHash: rep.KeyHash, RunnerID: rep.RunnerID, Label: rep.Label,
		Reason: string(rep.Reason), HeldMs: event.Ms(rep.Held), TookMs: event.Ms(rep.Took),
	}
	typ := TypeSessionClosed
	if rep.Failed {
		typ = TypeSessionCloseFailed
		p.ErrorClass = ErrorClass(rep.Err)
		if rep.Err != nil {
			p.Error = rep.Err.Error()
		}
	}
	return event.Event{Type: typ, Payload: p,
		Meta: event.Meta{RunID: rep.RunID, SessionID: rep.SessionID, Tenant: rep.Tenant, Principal: rep.Principal}}
}

// ErrorClass names the kind of a teardown failure: timeout, panic,
// cancelled, or error (ClassTimeout and the others).
func ErrorClass(err error) string {
	var te *toolsession.TimeoutError
	var pe *toolsession.PanicError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &te), errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case errors.As(err, &pe):
		return ClassPanic
	case errors.Is(err, context.Canceled):
		return ClassCancelled
	}
	return ClassError
}
