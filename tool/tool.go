// Package tool is the seam between a door (the agent loop, the MCP server,
// a host) and the tools it calls.
//
// A [Tool] describes itself with a [Spec] and is called with a [*Call]:
// the ids of this call, the caller's identity exactly as given (nil when
// none), the teardown scopes this door honours, and [Call.OnTeardown],
// through which a tool that holds a live session learns when it is over.
// [Func] builds a typed tool whose input JSON Schema comes from a Go type
// and whose arguments are validated before the function runs.
//
// [Invoke] is the one way a door calls a tool: every door (the agent
// loop, a durable turn's tool activity, the MCP server, a host lending
// its tools) describes itself as a [Door] and calls through it, so
// validation, panic recovery, failure classes, the closing of call-scoped
// sessions and the call's events happen the same way everywhere. A tool
// that needs a person's approval mid-call returns [CheckIn]'s error; when
// the call runs again once a person approved, [ApprovalFrom] says so.
//
// The package defines the events of tool calls and tool sessions
// ([TypeCallEnd], [SessionClosed] …) and the failure classes ([ClassToolError]
// and the others), once, for every door, the loop and the teardown tier.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/toolsession"
)

// Identity is who the caller says it is acting for. It reaches tools as
// given; agentry never synthesises one.
type Identity struct {
	Tenant         string `json:"tenant,omitempty"`
	Principal      string `json:"principal,omitempty"`
	ConversationID string `json:"conversationId,omitempty"`
}

// Clone returns a copy of id that shares nothing with it, or nil when id
// is nil: absent stays absent.
func (id *Identity) Clone() *Identity {
	if id == nil {
		return nil
	}
	c := *id
	return &c
}

// Equal reports whether id and other name the same caller: both nil, or
// both set with equal fields. A nil identity never equals a set one, not
// even an empty one.
func (id *Identity) Equal(other *Identity) bool {
	if id == nil || other == nil {
		return id == other
	}
	return *id == *other
}

// Spec describes a tool to a model.
type Spec struct {
	Name        string
	Description string
	// InputSchema is a JSON Schema for the arguments (an object).
	InputSchema json.RawMessage
	// CheckIn asks the door to pause for a person's approval before every
	// call of this tool.
	CheckIn bool
}

// Result is what a tool hands back to the model.
type Result struct {
	Content string
	IsError bool
	// Sandbox is what the call's sandbox used, when the tool runs code
	// in one whose control group counts it; nil otherwise. It is not told
	// to the model: the turn's usage counts it.
	Sandbox *SandboxUsage `json:",omitempty"`
}

// SandboxUsage is what one call's sandbox used: the CPU time its
// processes spent during the call, and the most memory the sandbox held
// at once (since it started), as its control group counts them.
type SandboxUsage struct {
	CPU        time.Duration `json:"cpu"`
	PeakMemory int64         `json:"peakMemory"`
}

// Tool is one capability the model can call. Implementations are shared by
// every run and must be safe for concurrent use.
type Tool interface {
	Spec() Spec
	// Call runs the tool. Return an error when the tool could not do its
	// job at all; the door turns it into an error result for the model.
	Call(ctx context.Context, c *Call, args json.RawMessage) (Result, error)
}

// Registrar is how a door lets a tool register a teardown: usually a
// closure over a *toolsession.Tier's Register that also emits the
// session_started or session_reused event.
type Registrar func(toolsession.Origin, func(context.Context) error, toolsession.Options) toolsession.Outcome

// Call is what a tool learns about one call.
type Call struct {
	// Tool is the name of the tool being called.
	Tool string
	// ToolCallID identifies this call.
	ToolCallID string
	// RunID is empty when the door has no run (MCP).
	RunID string
	// SessionID is empty unless the run is bound to a hosted conversation.
	SessionID string
	// Identity is nil when the caller passed none.
	Identity *Identity
	// Scopes lists the teardown scopes this door honours; nil means none.
	Scopes []toolsession.Scope

	register Registrar
	hold     Holder
	emit     func(event.Event)
}

// Holder is how a door lets a tool pin the session a call uses (see
// [Call.Hold]): usually a closure over a *toolsession.Tier's Hold that
// also reports waits and refusals as events.
type Holder func(ctx context.Context, o toolsession.Origin, opt toolsession.Options) (*toolsession.Lease, error)

// NewCall is for doors: it builds the Call a tool receives. register may
// be nil when the door honours no scope.
func NewCall(toolName, toolCallID, runID, sessionID string, id *Identity, scopes []toolsession.Scope,
	register func(toolsession.Origin, func(context.Context) error, toolsession.Options) toolsession.Outcome) *Call {
	return &Call{
		Tool:       toolName,
		ToolCallID: toolCallID,
		RunID:      runID,
		SessionID:  sessionID,
		Identity:   id,
		Scopes:     scopes,
		register:   register,
	}
}

// WithEvents is for doors: it makes events a tool sends through
// [Call.Emit] reach emit (usually the door's event bus). It returns c.
func (c *Call) WithEvents(emit func(event.Event)) *Call {
	c.emit = emit
	return c
}

// WithHolder is for doors: it lets tools pin their sessions through
// [Call.Hold] for as long as a call is in flight. It returns c.
func (c *Call) WithHolder(h Holder) *Call {
	c.hold = h
	return c
}

// Emit sends an event from inside the call to the door's event stream,
// filling the meta the door knows (run, session, and tenant/principal when
// the caller gave an identity) where e leaves it empty. Without a door
// stream it does nothing.
func (c *Call) Emit(e event.Event) {
	if c.emit == nil {
		return
	}
	if e.Meta.RunID == "" {
		e.Meta.RunID = c.RunID
	}
	if e.Meta.SessionID == "" {
		e.Meta.SessionID = c.SessionID
	}
	if c.Identity != nil && e.Meta.Tenant == "" && e.Meta.Principal == "" {
		e.Meta.Tenant, e.Meta.Principal = c.Identity.Tenant, c.Identity.Principal
	}
	c.emit(e)
}

// Facts returns what this call knows for deriving an isolation key.
func (c *Call) Facts() toolsession.Facts {
	f := toolsession.Facts{ToolCallID: c.ToolCallID, RunID: c.RunID, SessionID: c.SessionID}
	if c.Identity != nil {
		f.Tenant, f.Principal = c.Identity.Tenant, c.Identity.Principal
	}
	return f
}

// Honours reports whether the door can honour teardown scope s.
func (c *Call) Honours(s toolsession.Scope) bool {
	return c.register != nil && slices.Contains(c.Scopes, s)
}

// Key derives the isolation key for scope s from this call's facts. The
// error names the missing fact and the fix.
func (c *Call) Key(s toolsession.Scope) (string, error) {
	if !s.Valid() {
		return "", fmt.Errorf("tool %s: unknown teardown scope %q; use call, run, session or shutdown", c.Tool, s)
	}
	k, ok := toolsession.Key(s, c.Facts())
	if ok {
		return k, nil
	}
	switch s {
	case toolsession.ScopeSession:
		return "", &MissingFactError{Tool: c.Tool, Scope: s, Fact: "session id",
			Fix: "bind the run to a conversation (Input.SessionID), or use scope run"}
	case toolsession.ScopeRun:
		return "", &MissingFactError{Tool: c.Tool, Scope: s, Fact: "run id",
			Fix: "this door has no runs; use scope call"}
	case toolsession.ScopeCall:
		return "", &MissingFactError{Tool: c.Tool, Scope: s, Fact: "tool call id",
			Fix: "the door must give every call an id"}
	}
	return "", &MissingFactError{Tool: c.Tool, Scope: s, Fact: "key",
		Fix: "scope shutdown has no key of its own; pass Options.Key"}
}

// OnTeardown registers cleanup to run when the session it guards is over,
// as scoped by opt (zero scope means run). It refuses, naming the scope and
// what the door honours, when the door cannot honour the scope. An empty
// opt.Key is derived from the call's facts with [toolsession.Key]; when the
// facts are missing it refuses rather than widen or narrow the scope.
func (c *Call) OnTeardown(cleanup func(context.Context) error, opt toolsession.Options) (toolsession.Outcome, error) {
	origin, opt, err := c.prepare(opt)
	if err != nil {
		return toolsession.Outcome{}, err
	}
	return c.register(origin, cleanup, opt), nil
}

// Hold pins, for the rest of this call, the session a tool keeps under opt
// (scoped and keyed as [Call.OnTeardown] does, with the same refusals), or
// reserves room for it when there is none yet — call it before starting a
// session, so nothing is started without room. While the lease is held the
// session is never evicted nor swept idle; release it when the call is
// over. When every live session is busy, Hold waits up to the door's bound
// and returns an error matching toolsession.ErrCapacity: nothing was
// started, and the caller should retry later. A door that cannot pin
// (no holder) returns a nil lease and no error; a nil lease is valid and
// holds nothing.
func (c *Call) Hold(ctx context.Context, opt toolsession.Options) (*toolsession.Lease, error) {
	origin, opt, err := c.prepare(opt)
	if err != nil {
		return nil, err
	}
	if c.hold == nil || opt.Key == "" {
		return nil, nil
	}
	return c.hold(ctx, origin, opt)
}

// prepare checks that the door honours opt's scope and derives the key
// when opt has none.
func (c *Call) prepare(opt toolsession.Options) (toolsession.Origin, toolsession.Options, error) {
	if opt.Scope == "" {
		opt.Scope = toolsession.ScopeRun
	}
	if !c.Honours(opt.Scope) {
		return toolsession.Origin{}, opt, &ScopeError{Tool: c.Tool, Scope: opt.Scope, Honoured: c.honoured()}
	}
	if opt.Key == "" && opt.Scope != toolsession.ScopeShutdown {
		k, err := c.Key(opt.Scope)
		if err != nil {
			return toolsession.Origin{}, opt, err
		}
		opt.Key = k
	}
	origin := toolsession.Origin{Tool: c.Tool, ToolCallID: c.ToolCallID, RunID: c.RunID, SessionID: c.SessionID}
	if c.Identity != nil {
		origin.Tenant, origin.Principal = c.Identity.Tenant, c.Identity.Principal
	}
	return origin, opt, nil
}

func (c *Call) honoured() []toolsession.Scope {
	if c.register == nil {
		return nil
	}
	return slices.Clone(c.Scopes)
}

// ScopeError is the refusal of a teardown scope the door cannot honour.
type ScopeError struct {
	Tool     string
	Scope    toolsession.Scope
	Honoured []toolsession.Scope
}

func (e *ScopeError) Error() string {
	if len(e.Honoured) == 0 {
		return fmt.Sprintf("tool %s: teardown scope %q is not honoured here: this door honours no teardown scopes", e.Tool, e.Scope)
	}
	return fmt.Sprintf("tool %s: teardown scope %q is not honoured here: this door honours only %v; configure the tool with one of those",
		e.Tool, e.Scope, e.Honoured)
}

// MissingFactError is the refusal to key a session whose scope needs a
// fact the call does not have.
type MissingFactError struct {
	Tool  string
	Scope toolsession.Scope
	Fact  string
	Fix   string
}

func (e *MissingFactError) Error() string {
	return fmt.Sprintf("tool %s: scope %q needs a %s and this call has none; %s", e.Tool, e.Scope, e.Fact, e.Fix)
}
