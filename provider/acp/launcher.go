package acp

import (
	"context"
	"github.com/agentry-dev/agentry/provider/acp/jail"
	"io"
	"os/exec"
)

// Launcher is the process seam: it starts the agent process of one
// session, confined however the launcher confines. The adapter refuses to
// run without one; the jail (package provider/acp/jail) is the launcher
// for hosts that serve several people, and [Unjailed] is the explicit
// single-user choice.
type Launcher interface {
	// Launch starts one agent process for one session.
	Launch(ctx context.Context, spec LaunchSpec) (Process, error)
}

// LaunchSpec is everything a launcher is told about one agent process:
// the jail's [jail.Spec], one type for every launcher.
type LaunchSpec = jail.Spec

// Exposed is a host-side listener a launcher makes reachable from inside
// the agent's confinement ([jail.Exposed]).
type Exposed = jail.Exposed

// Process is one running agent process.
type Process interface {
	// Stdin is the agent's standard input (the adapter writes ACP to it).
	Stdin() io.WriteCloser
	// Stdout is the agent's standard output (the adapter reads ACP).
	Stdout() io.ReadCloser
	// Done is closed when the agent has exited.
	Done() <-chan struct{}
	// Err says why it exited, once Done is closed (nil: exit status 0
	// after being asked to stop, or on its own).
	Err() error
	// Addr is where the Exposed listener of that name is reached from
	// inside ("127.0.0.1:PORT"), or "" when there is none.
	Addr(name string) string
	// Stop ends the process: SIGTERM, then SIGKILL of its process group
	// when ctx ends. It is idempotent (concurrent calls share one stop),
	// waits for the exit, and reports it through the spec's Events.
	Stop(ctx context.Context) error
	// Command prepares a terminal command confined like the agent. cwd is
	// relative to the workspace ("" or "." is the workspace itself); env
	// is NAME=VALUE and is all the command sees. The caller starts and
	// waits for the command.
	Command(ctx context.Context, argv []string, cwd string, env []string) (*exec.Cmd, error)
}
