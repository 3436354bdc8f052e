package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/toolsession"
)

// Door is how a door calls tools: the agent loop for one run, a durable
// turn's tool activity, the MCP server, a host lending its tools. [Invoke]
// reads it; a door builds one per run, call or server and may share it
// between concurrent calls.
type Door struct {
	// Scopes are the teardown scopes the door honours; every call gets
	// its own copy.
	Scopes []toolsession.Scope
	// Register and Hold reach the door's teardown tier (see [NewCall] and
	// [Call.WithHolder]); nil when the door has none.
	Register Registrar
	Hold     Holder
	// Meta is the meta of the call's own events (tool_start, tool_end,
	// tool_panic).
	Meta event.Meta
	// Report receives the call's own events; nil drops them. Hears, when
	// set, says whether anyone hears an event type, so a payload nobody
	// reads is not built.
	Report func(event.Event)
	Hears  func(event.Type) bool
	// Events receives what a tool sends through [Call.Emit]; nil drops it.
	Events func(event.Event)
	// Settle closes the call-scoped sessions of a call that has settled
	// (returned, failed, or was refused); nil when the door holds none. It
	// is not called for a call that asked a person: its sessions stay open
	// until the answer.
	Settle func(toolCallID string)
	// Asks is true when the door can pause a call for a person
	// ([CheckIn]). A door that cannot answers such a call as declined.
	Asks bool
	// Now is the clock of the call's duration (default time.Now).
	Now func() time.Time
}

// Request is one call through a door.
type Request struct {
	// Name is the tool's name, as the caller named it.
	Name string
	// Tool is the tool to call; nil when the door has none of that name
	// (the call is answered as an unknown tool).
	Tool Tool
	// Valid checks the arguments before the call; nil when the door's
	// caller has checked them already.
	Valid *Validator
	// ToolCallID, RunID, SessionID and Identity are what the tool is told
	// (see [Call]); Identity is copied, never shared with the tool.
	ToolCallID, RunID, SessionID string
	Identity                     *Identity
	// Args are the arguments; absent and null read as {}.
	Args json.RawMessage
	// Iteration is the loop iteration (model call) that asked for the
	// call, in its events; 0 outside a loop.
	Iteration int
	// Approval is set when the call runs because a person approved it
	// (see [ApprovalFrom]).
	Approval *Approval
	// Refused, when set, is the answer to a call that does not run (a
	// call a person declined, an unknown tool): Invoke only tells of it
	// and closes its call scope.
	Refused *Outcome
}

// Outcome is how a call came out.
type Outcome struct {
	// Result is what the model (or client) is told.
	Result Result `json:"result"`
	// Class says why Result is an error: one of the event.Class
	// constants. Empty when it is not.
	Class string `json:"class,omitempty"`
	// Asked is the question of a tool that asked a person mid-call
	// ([CheckIn]) through a door that can ask: the call has not settled,
	// and Result is empty.
	Asked string `json:"asked,omitempty"`
	// Err is what lies behind an error result, for the door: the tool's
	// error, a *toolsession.PanicError, a capacity refusal. It does not
	// travel (JSON), and never reaches the model as is.
	Err error `json:"-"`
}

// Invoke calls one tool for a door: it announces the call (tool_start),
// validates the arguments, builds the [Call] the tool is told, calls it
// with panics recovered (a *toolsession.PanicError and a tool_panic
// event), sorts how it failed into a failure class, closes the call's
// call-scoped sessions once it has settled, and announces how it ended
// (tool_end). Nothing the tool does reaches the door as a panic or an
// error: every failure is an Outcome the model can read.
func Invoke(ctx context.Context, d *Door, r Request) Outcome {
	now := d.Now
	if now == nil {
		now = time.Now
	}
	if d.hears(TypeCallStart) {
		d.Report(event.Event{Type: TypeCallStart, Meta: d.Meta,
			Payload: &CallStart{Tool: r.Name, ToolCallID: r.ToolCallID, Iteration: r.Iteration, Args: r.Args}})
	}
	var out Outcome
	var took time.Duration
	told := d.hears(TypeCallEnd) // the clock is read only for someone
	if r.Refused != nil {
		out = *r.Refused
	} else {
		var start time.Time
		if told {
			start = now()
		}
		out = d.call(ctx, r)
		if out.Asked != "" {
			return out
		}
		if told {
			took = now().Sub(start)
		}
	}
	if d.Settle != nil {
		d.Settle(r.ToolCallID)
	}
	if told {
		d.Report(event.Event{Type: TypeCallEnd, Meta: d.Meta, Payload: &CallEnd{Tool: r.Name, ToolCallID: r.ToolCallID,
			DurationMs: event.Ms(took), IsError: out.Result.IsError, ErrorClass: out.Class, Content: out.Result.Content}})
	}
	return out
}

func (d *Door) hears(t event.Type) bool {
	return d.Report != nil && (d.Hears == nil || d.Hears(t))
}

// call validates and runs the tool, and sorts what came back.
func (d *Door) call(ctx context.Context, r Request) Outcome {
	if r.Tool == nil {
		return failed(fmt.Sprintf("There is no tool named %q here.", r.Name), ClassUnknownTool, nil)
	}
	args := normalise(r.Args)
	if r.Valid != nil {
		if err := r.Valid.Validate(args); err != nil {
			return failed(err.Error(), ClassInvalidArguments, err)
		}
	}
	if r.Approval != nil {
		ctx = context.WithValue(ctx, approvalKey{}, *r.Approval)
	}
	c := NewCall(r.Name, r.ToolCallID, r.RunID, r.SessionID, r.Identity.Clone(), slices.Clone(d.Scopes), d.Register)
	c.emit, c.hold = d.Events, d.Hold
	res, err := d.run(ctx, r.Tool, c, args)
	switch {
	case err == nil && res.IsError:
		return Outcome{Result: res, Class: ClassToolError}
	case err == nil:
		return Outcome{Result: res}
	}
	return d.failure(r.Name, err)
}

// failure sorts a call's error into its class and what the model is told.
func (d *Door) failure(name string, err error) Outcome {
	var ask *CheckInRequest
	var pe *toolsession.PanicError
	switch {
	case errors.As(err, &pe):
		return failed(fmt.Sprintf("The tool %s failed unexpectedly: it panicked. The call was stopped and the panic reported; its details are not shown here.", name),
			ClassPanic, err)
	case errors.As(err, &ask) && d.Asks:
		return Outcome{Asked: ask.Question, Err: err}
	case errors.As(err, &ask):
		return failed(fmt.Sprintf("The tool %s asks a person before it goes on (%q), and nobody can be asked here; the call did not complete.", name, ask.Question),
			ClassDeclined, err)
	case errors.Is(err, toolsession.ErrCapacity):
		return failed(fmt.Sprintf("The tool %s could not open a session: %v", name, err), ClassCapacity, err)
	case IsArgumentError(err):
		return failed(err.Error(), ClassInvalidArguments, err)
	case isScopeRefusal(err):
		return failed(fmt.Sprintf("The tool %s asked for what this door cannot give: %v", name, err), ClassDeclined, err)
	}
	return failed(fmt.Sprintf("The tool %s failed: %v", name, err), ClassToolError, err)
}

// run calls the tool, turning a panic into a *toolsession.PanicError and
// a tool_panic event.
func (d *Door) run(ctx context.Context, t Tool, c *Call, args json.RawMessage) (res Result, err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		err = &toolsession.PanicError{Tool: c.Tool, ToolCallID: c.ToolCallID, Value: v, Stack: debug.Stack()}
		if d.hears(TypePanic) {
			d.Report(event.Event{Type: TypePanic, Meta: d.Meta,
				Payload: &Panicked{Tool: c.Tool, ToolCallID: c.ToolCallID, Panic: clip(fmt.Sprint(v), 500)}})
		}
	}()
	return t.Call(ctx, c, args)
}

func failed(content, class string, err error) Outcome {
	return Outcome{Result: Result{Content: content, IsError: true}, Class: class, Err: err}
}

// normalise reads absent and null arguments as an empty object: a model
// or a client may omit them for a tool that takes none.
func normalise(args json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(args)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return json.RawMessage("{}")
	}
	return args
}

// isScopeRefusal reports whether err is the door refusing a teardown
// scope, or a key it cannot derive.
func isScopeRefusal(err error) bool {
	var se *ScopeError
	var me *MissingFactError
	return errors.As(err, &se) || errors.As(err, &me)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
