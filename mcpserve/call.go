package mcpserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// callScopes is what this door honours: a served call has no run and no
// conversation, so only the call itself can bound a session.
var callScopes = []toolsession.Scope{toolsession.ScopeCall}

// handler adapts one tool to the SDK's low-level tool handler: the door
// does its own validation and result mapping, so a tool error is always a
// result with isError, never a protocol error.
func (s *Server) handler(sv *served) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args json.RawMessage
		if req.Params != nil {
			args = req.Params.Arguments
		}
		return toMCP(s.serve(ctx, sv, args, identityOf(req))), nil
	}
}

// serve runs one call from start to settle through tool.Invoke. id is the
// identity the transport proved, or nil.
func (s *Server) serve(ctx context.Context, sv *served, args json.RawMessage, id *tool.Identity) tool.Result {
	if !s.flight.enter() {
		return tool.Result{IsError: true,
			Content: fmt.Sprintf("tool %s was not called: %v and takes no new calls; try again once it is back", sv.spec.Name, ErrShutdown)}
	}
	defer s.flight.leave()

	meta := event.Meta{}
	if id != nil {
		meta.Tenant, meta.Principal = id.Tenant, id.Principal
	}
	c := &callState{s: s, id: newCallID(), meta: meta}
	door := &tool.Door{Scopes: callScopes, Register: c.register, Hold: c.hold, Meta: meta, Report: s.emit, Events: s.emit,
		Settle: func(string) { c.settle() }, Now: s.opt.Now}
	req := tool.Request{Name: sv.spec.Name, Tool: sv.t, Valid: sv.v, ToolCallID: c.id, Identity: id, Args: args}
	select {
	case s.calls <- struct{}{}:
		defer func() { <-s.calls }()
	default:
		// Refused before anything runs, so a client may simply retry.
		req.Refused = &tool.Outcome{Class: tool.ClassCapacity, Result: tool.Result{IsError: true, Content: fmt.Sprintf(
			"tool %s was not called: this server already runs %d calls at once, "+
				"its bound on concurrent calls (mcpserve Options.MaxCalls; agentry mcp --max-calls); nothing was run, so retry once a call has finished",
			sv.spec.Name, s.opt.MaxCalls)}}
		return tool.Invoke(ctx, door, req).Result
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopWatching := context.AfterFunc(s.stop, func() { cancel(ErrShutdown) })
	defer stopWatching()

	out := tool.Invoke(ctx, door, req)
	var pe *toolsession.PanicError
	if errors.As(out.Err, &pe) {
		// The client's result does not repeat the panic; OnError gets it,
		// with the stack.
		s.onError(pe)
	}
	return out.Result
}

// toMCP maps a tool result to MCP's: the content as one text block, and
// IsError as isError.
func toMCP(r tool.Result) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: r.Content}},
		IsError: r.IsError,
	}
}

// newCallID returns a fresh id for a served call: 128 random bits, so ids
// never repeat across calls, sessions or processes.
func newCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "mcp-" + hex.EncodeToString(b[:])
}

// callState is one call's link to the tier: it knows whether the call has
// settled, so a registration that arrives too late is closed at once
// instead of being held until shutdown.
type callState struct {
	s  *Server
	id string
	// meta carries the proved identity (tenant, principal) into the
	// session events, as into the call's other events.
	meta event.Meta

	mu         sync.Mutex
	registered bool
	settled    bool
}

// register is the call's tool.Registrar. It builds the tier on first use.
func (c *callState) register(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
	t := c.s.ensureTier()
	c.mu.Lock()
	out := t.Register(o, cleanup, opt)
	c.registered = true
	late := c.settled
	// Emitted under the lock, so a racing settle cannot report the close
	// before the start.
	e := tool.SessionEvent(o, opt, out)
	e.Meta.Tenant, e.Meta.Principal = c.meta.Tenant, c.meta.Principal
	c.s.emit(e)
	c.mu.Unlock()
	if late {
		// A goroutine the tool left behind registered after its call had
		// settled. The call is over, so is the session.
		t.FireCall(context.Background(), c.id)
	}
	return out
}

// hold is the call's tool.Holder: it pins the session the call uses, or
// reserves room for it, and reports a wait or a refusal.
func (c *callState) hold(ctx context.Context, o toolsession.Origin, opt toolsession.Options) (*toolsession.Lease, error) {
	l, err := c.s.ensureTier().Hold(ctx, o, opt)
	if e, ok := tool.CapacityEvent(o, opt, l, err); ok {
		e.Meta.Tenant, e.Meta.Principal = c.meta.Tenant, c.meta.Principal
		c.s.emit(e)
	}
	return l, err
}

// settle fires the call's cleanups, each bounded by the teardown timeout.
// It waits for them, so a client that gets the result knows the call's
// sessions are closed (or reported as failing to close).
func (c *callState) settle() {
	c.mu.Lock()
	c.settled = true
	registered := c.registered
	c.mu.Unlock()
	if !registered {
		return
	}
	if t := c.s.tier.Load(); t != nil {
		t.FireCall(context.Background(), c.id)
	}
}

// report is the tier's Config.Report: every close becomes an event, goes
// to the Report hook, and a failure also to OnError.
func (s *Server) report(rep toolsession.Report) {
	s.emit(tool.CloseEvent(rep))
	if s.opt.Report != nil {
		s.guard("the Report hook", func() { s.opt.Report(rep) })
	}
	if rep.Failed {
		s.onError(&TeardownError{Report: rep})
	}
}

// emit stamps the time and hands e to the sink and the hook. A panic in
// either is recovered and reported.
func (s *Server) emit(e event.Event) {
	if s.opt.Sink == nil && s.opt.OnEvent == nil {
		return
	}
	if e.Meta.Time.IsZero() {
		e.Meta.Time = s.opt.Now()
	}
	if s.opt.Sink != nil {
		s.guard("the event sink", func() { s.opt.Sink.Export(e) })
	}
	if s.opt.OnEvent != nil {
		s.guard("the OnEvent hook", func() { s.opt.OnEvent(e) })
	}
}

func (s *Server) guard(what string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			s.onError(fmt.Errorf("mcpserve: %s panicked (recovered): %v", what, v))
		}
	}()
	f()
}

// onError hands err to OnError, or logs it when none is set: a failure is
// never dropped.
func (s *Server) onError(err error) {
	if s.opt.OnError == nil {
		slog.Error("agentry mcp door", "err", err)
		return
	}
	defer func() {
		if v := recover(); v != nil {
			slog.Error("agentry mcp door: the OnError hook panicked (recovered)", "panic", fmt.Sprint(v), "err", err)
		}
	}()
	s.opt.OnError(err)
}

// TeardownError is a cleanup that failed, panicked or timed out. Report.Err
// is the cause (a *toolsession.TimeoutError on timeout, a
// *toolsession.PanicError on panic); errors.As reaches it.
type TeardownError struct {
	Report toolsession.Report
}

func (e *TeardownError) Error() string {
	r := e.Report
	return fmt.Sprintf("mcpserve: closing the %s-scoped session %s of tool %s (reason %s, after %s) failed: %v",
		r.Scope, r.KeyHash, r.Tool, r.Reason, r.Took.Round(time.Millisecond), r.Err)
}

func (e *TeardownError) Unwrap() error { return e.Report.Err }
