package tool

import (
	"context"
	"errors"
)

// Workspacer is the optional port of a tool whose sessions keep files in a
// directory of this machine for as long as a conversation lasts (the
// interpreter of code.NewTool with scope session: its /work). A door finds
// it by type assertion to move a person's files in and out.
type Workspacer interface {
	// Workspace returns the directory of the session a call with c's
	// facts would use, starting that session (and registering its
	// teardown, as a call does) when none is live. It returns an error
	// wrapping ErrNoWorkspace when the tool's sessions keep no such
	// directory.
	Workspace(ctx context.Context, c *Call) (string, error)
}

// ErrNoWorkspace says no tool keeps a conversation's files.
var ErrNoWorkspace = errors.New("no tool keeps a conversation's files; give the agent a code tool whose sessions last the conversation (scope session) on a local runner")

// WorkspaceOf finds the Workspacer t is, or wraps: a wrapper that adds to
// a tool ([WithCheckIn], a provider's guard) leads to it with an
// Unwrap() Tool method.
func WorkspaceOf(t Tool) (Workspacer, bool) {
	for range 16 { // wrappers nest a few deep, never in a cycle
		if w, ok := t.(Workspacer); ok {
			return w, true
		}
		u, ok := t.(interface{ Unwrap() Tool })
		if !ok {
			return nil, false
		}
		t = u.Unwrap()
	}
	return nil, false
}
