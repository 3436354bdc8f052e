package agent

import (
	"context"
	"fmt"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// workspaceCallID is the tool-call id of the call Workspace makes: it
// names no model's call.
const workspaceCallID = "workspace"

// Workspace returns the directory holding the conversation's files: that
// of the first of the agent's tools (in Options.Tools order) that keeps
// one ([tool.Workspacer], such as code.NewTool with scope session),
// starting its session for the conversation when none is live, under the
// same isolation key a call in one of the conversation's runs would use.
// The error wraps tool.ErrNoWorkspace when no tool keeps one.
func (a *Agent) Workspace(ctx context.Context, sessionID string, id *tool.Identity) (string, error) {
	if sessionID == "" {
		return "", fmt.Errorf("agent: a workspace belongs to a conversation; pass its session id")
	}
	// Counted as in flight, as a run is: Shutdown waits for it, and what
	// it registers after Shutdown fired is fired again.
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return "", ErrShutdown
	}
	a.inflight++
	a.mu.Unlock()
	defer a.leaveWorkspace(ctx)
	var ws tool.Workspacer
	var name string
	for _, d := range a.defs {
		if w, ok := tool.WorkspaceOf(a.tools[d.Name].tool); ok {
			ws, name = w, d.Name
			break
		}
	}
	if ws == nil {
		return "", fmt.Errorf("agent: %w", tool.ErrNoWorkspace)
	}
	meta := event.Meta{SessionID: sessionID, AgentID: a.id}
	if id != nil {
		meta.Tenant, meta.Principal = id.Tenant, id.Principal
	}
	register := func(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
		out := a.tierFor().Register(o, cleanup, opt)
		e := tool.SessionEvent(o, opt, out)
		e.Meta = meta
		a.bus.Export(e)
		return out
	}
	hold := func(ctx context.Context, o toolsession.Origin, opt toolsession.Options) (*toolsession.Lease, error) {
		l, err := a.tierFor().Hold(ctx, o, opt)
		if e, ok := tool.CapacityEvent(o, opt, l, err); ok {
			e.Meta = meta
			a.bus.Export(e)
		}
		return l, err
	}
	c := tool.NewCall(name, workspaceCallID, "", sessionID, id.Clone(), []toolsession.Scope{toolsession.ScopeSession}, register).WithHolder(hold)
	return ws.Workspace(ctx, c)
}

// leaveWorkspace is finish for Workspace.
func (a *Agent) leaveWorkspace(ctx context.Context) {
	a.mu.Lock()
	a.inflight--
	if a.closing && a.inflight == 0 && a.drained != nil {
		close(a.drained)
		a.drained = nil
	}
	late := a.fired
	a.mu.Unlock()
	if late {
		if t := a.tier.Load(); t != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.teardown)
			t.FireShutdown(ctx)
			cancel()
		}
	}
}
