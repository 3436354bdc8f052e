package tool

import (
	"context"
	"errors"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/toolsession"
)

// SessionEvent is the event a door emits from inside a call when a tool
// registers a teardown: session_started, or session_reused when it joined
// a session already held. Meta carries the origin's run and session.
func SessionEvent(o toolsession.Origin, opt toolsession.Options, out toolsession.Outcome) event.Event {
	typ := event.TypeSessionStarted
	if out.Reused {
		typ = event.TypeSessionReused
	}
	scope := opt.Scope
	if scope == "" {
		scope = toolsession.ScopeRun
	}
	return event.Event{
		Type: typ,
		Payload: &event.ToolSession{Tool: o.Tool, Scope: string(scope), KeyHash: out.KeyHash,
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
	p := &event.ToolSessionCapacity{Tool: o.Tool, Scope: string(scope)}
	var ce *toolsession.CapacityError
	switch {
	case errors.As(err, &ce):
		p.KeyHash, p.MaxLive, p.WaitedMs, p.Outcome = toolsession.HashKey(opt.Key), ce.MaxLive, event.Ms(ce.Waited), event.CapacityRefused
	case err == nil && l != nil && l.Queued:
		p.KeyHash, p.MaxLive, p.WaitedMs, p.Outcome = l.KeyHash, l.MaxLive, event.Ms(l.Waited), event.CapacityAdmitted
	default:
		return event.Event{}, false
	}
	return event.Event{Type: event.TypeSessionCapacity, Payload: p,
		Meta: event.Meta{RunID: o.RunID, SessionID: o.SessionID, Tenant: o.Tenant, Principal: o.Principal}}, true
}

// CloseEvent is the event for a teardown report: session_closed, or
// session_close_failed with the error and its class. Meta carries the
// origin's run and session, not whatever run is current when it fires.
func CloseEvent(rep toolsession.Report) event.Event {
	p := &event.ToolSessionClosed{
		Tool: rep.Tool, Scope: string(rep.Scope), KeyHash: rep.KeyHash, RunnerID: rep.RunnerID, Label: rep.Label,
		Reason: string(rep.Reason), HeldMs: event.Ms(rep.Held), TookMs: event.Ms(rep.Took),
	}
	typ := event.TypeSessionClosed
	if rep.Failed {
		typ = event.TypeSessionCloseFailed
		p.ErrorClass = ErrorClass(rep.Err)
		if rep.Err != nil {
			p.Error = rep.Err.Error()
		}
	}
	return event.Event{Type: typ, Payload: p,
		Meta: event.Meta{RunID: rep.RunID, SessionID: rep.SessionID, Tenant: rep.Tenant, Principal: rep.Principal}}
}

// ErrorClass names the kind of a teardown failure: timeout, panic,
// cancelled, or error (event.ClassTimeout and the others).
func ErrorClass(err error) string {
	var te *toolsession.TimeoutError
	var pe *toolsession.PanicError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &te), errors.Is(err, context.DeadlineExceeded):
		return event.ClassTimeout
	case errors.As(err, &pe):
		return event.ClassPanic
	case errors.Is(err, context.Canceled):
		return event.ClassCancelled
	}
	return event.ClassError
}
