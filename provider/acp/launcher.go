package acp

import (
	"context"
	"io"
	"net"
	"os/exec"

	"github.com/agentry-dev/agentry/event"
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

// LaunchSpec is everything a launcher is told about one agent process.
type LaunchSpec struct {
	// Argv is the agent command; Argv[0] is resolved by the launcher.
	Argv []string
	// Env is everything the agent may see, as NAME=VALUE. The launcher
	// adds HOME (the private copy of Home) and nothing else it is not
	// asked for.
	Env []string
	// Workspace is an absolute host path: the agent's working directory
	// and its one writable directory.
	Workspace string
	// Home is a template directory copied into a private HOME ("" gives
	// an empty HOME).
	Home string
	// AllowHosts are the host:port pairs the agent may reach.
	AllowHosts []string
	// Label is a non-secret short name for events and paths (a hash of the
	// session id).
	Label string
	// Events is where the launcher reports (the process started and
	// stopped, refused connections). Never nil when the adapter launches.
	Events func(event.Event)
	// Expose lists local listeners the agent must reach (the host-tools
	// MCP server): the launcher makes each reachable from inside its
	// confinement, at the address Process.Addr returns for its name.
	Expose []Exposed
}

// Exposed is a host-side listener a launcher makes reachable from inside
// the agent's confinement.
type Exposed struct {
	Name     string
	Listener net.Listener
}

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
