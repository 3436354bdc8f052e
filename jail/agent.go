package jail

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// ErrCommand is wrapped when the agent's command cannot be found or run
// inside the jail (not on the jail's PATH, not executable, its #!
// interpreter missing).
var ErrCommand = errors.New("jail: the agent's command cannot be run")

// Defaults of [AgentOptions] (the agent profile's rlimits and bounds).
const (
	agentProcesses     = 512 // threads count: node alone has about a dozen
	agentOpenFiles     = 4096
	agentStartTimeout  = 10 * time.Second
	agentDialTimeout   = 10 * time.Second
	agentPrivatePrefix = cellPrefix + "agent-"
)

// AgentOptions configure the agent profile ([NewAgent]). Zero values take
// the defaults.
type AgentOptions struct {
	// Bwrap is the bubblewrap program (default "bwrap" on the host's PATH).
	Bwrap string
	// UID and GID are the unprivileged host ids every jailed process runs
	// as (default 65534).
	UID, GID int
	// Dir is where each launch's cell (HOME, /tmp, the generated /etc
	// files) is made (default os.TempDir()). It must be traversable by
	// UID. Check sweeps what dead agentry processes left there.
	Dir string
	// ReadOnly lists extra host paths mounted read-only at the same place.
	ReadOnly []string
	// Processes, OpenFiles and FileSize are rlimits set on every jailed
	// process (RLIMIT_NPROC, counted per jail, default 512; RLIMIT_NOFILE,
	// default 4096; RLIMIT_FSIZE in bytes, default 1 GiB).
	Processes, OpenFiles int
	FileSize             int64
	// StartTimeout bounds Launch's setup, before the agent runs
	// (default 10s).
	StartTimeout time.Duration
	// DialTimeout bounds each connection the jail makes for the agent to
	// an allowed endpoint or an exposed listener (default 10s).
	DialTimeout time.Duration
	// Caps, when set, confines each agent — the agent, every process it
	// starts and its terminals together — with the seccomp filter, a
	// control group with memory, process and CPU caps, and a size-capped
	// tmpfs for HOME and /tmp ([Caps]). Nil applies none of them, and
	// every agentry.jail.started event names them as not applied.
	Caps *Caps
	// Events receives the jail's own events: the agentry.runner.swept
	// reports of the sweep at its first Check or Launch (nil: none are
	// sent). A launch's events go to its Spec.Events.
	Events func(event.Event)
}

// Spec is one agent process to launch: what the jail is told, and what
// every launcher of provider/acp is told (acp.LaunchSpec is this type).
type Spec struct {
	// Argv is the agent's command. Argv[0] is a path or a name looked up
	// on the PATH of Env (DefaultPath when Env has none). An argument
	// that is the absolute path of a regular file (the script of node
	// /opt/agent/dist/index.js) is made visible read-only like Argv[0].
	Argv []string
	// Env is everything the agent may see, as NAME=VALUE. The launcher
	// adds HOME (the private copy of Home, or HomeDir) and, in the jail, the proxy
	// variables; Env cannot set those.
	Env []string
	// Workspace is an absolute host path: the agent's working directory
	// and its one writable directory (the jail binds it at the same path
	// and, when agentry runs as root, hands it to AgentOptions.UID).
	Workspace string
	// Home is a template directory copied into the private HOME ("" =
	// an empty HOME).
	Home string
	// HomeDir, when set, is an absolute host path bound as the agent's
	// HOME instead of a private one in its cell: it outlives the agent,
	// so the next agent of the same conversation finds what this one
	// wrote there (an agent's own record of its sessions, which its
	// session/load reads). The launch makes it (0700) when it does not
	// exist yet, seeded from Home — once: an existing HomeDir is used as
	// it is — and hands it to the jail's user like the workspace. It must
	// be a plain directory (not a link) whose parent exists, outside the
	// workspace and every agent's cell. It lies on the host's disk, so
	// the disk cap's tmpfs does not hold it; RLIMIT_FSIZE still bounds
	// each file.
	HomeDir string
	// AllowHosts are the host:port pairs the agent may reach.
	AllowHosts []string
	// Label is a short non-secret name (a hash of the session id) for
	// events and paths: up to 32 of [A-Za-z0-9._-].
	Label string
	// Events receives the launcher's events: the process started and
	// stopped, refused connections (nil: none are sent).
	Events func(event.Event)
	// Expose lists host-side listeners the agent must reach (the
	// host-tools MCP server): each is made reachable from inside the
	// agent's confinement at the address Process.Addr returns for its
	// name.
	Expose []Exposed
}

// Exposed is a host-side listener made reachable from inside the agent's
// confinement at Process.Addr(Name).
type Exposed struct {
	Name     string
	Listener net.Listener
}

// notApplied names the limits a jail lacks without Caps.
var notApplied = []string{"seccomp", "memory", "pids", "cpu", "disk"}

// Agent is the profile for a coding agent: each agent in a cell of its
// own, with its own network namespace reaching only its allowlist. Safe
// for concurrent use.
type Agent struct{ s *agentSettings }

// NewAgent checks o and returns the profile. It touches nothing on the
// machine until Check or Launch.
func NewAgent(o AgentOptions) (*Agent, error) {
	s, err := newAgentSettings(o)
	if err != nil {
		return nil, err
	}
	return &Agent{s: s}, nil
}

// Check sweeps, once, what dead agentry processes left in AgentOptions.Dir
// and the control groups, then proves that this machine can jail an agent
// the way Launch does: bubblewrap is installed, agentry runs as root, and
// a jail with its own network namespace can be built. Success is cached.
func (a *Agent) Check(ctx context.Context) error { return a.s.ready(ctx) }

// Launch starts s.Argv in a new jail and returns once the agent runs.
func (a *Agent) Launch(ctx context.Context, s Spec) (*Process, error) {
	return a.s.launch(ctx, s)
}

// Gaps names each cap of AgentOptions.Caps this machine cannot apply
// ("memory", "disk", …) and why; empty when every cap applies, or when
// there are no Caps.
func (a *Agent) Gaps() map[string]string { return a.s.caps.Gaps() }

// Close removes the control group the agents' groups were made in; every
// agent launched must have ended.
func (a *Agent) Close() error { return a.s.caps.close() }

// Process is one jailed agent.
type Process struct{ p *proc }

// Stdin is the agent's standard input.
func (p *Process) Stdin() io.WriteCloser { return p.p.stdin }

// Stdout is the agent's standard output. The caller closes it once
// drained; the jail closes Stdin when the agent ends.
func (p *Process) Stdout() io.ReadCloser { return p.p.stdout }

// Done is closed once the agent and everything in its jail have ended
// and the jail's resources are released.
func (p *Process) Done() <-chan struct{} { return p.p.done }

// Err is nil while the agent runs, when it exited with status 0, and when
// Stop ended it; otherwise it says how the agent ended.
func (p *Process) Err() error { return p.p.exitErr() }

// StderrTail is the last few KiB the agent wrote to its standard error.
// It may hold user data: show it to the session's own person, not to logs.
func (p *Process) StderrTail() string { return p.p.stderr.String() }

// Addr is where the agent reaches the exposed listener name (host:port
// inside the jail), or "" when no listener has that name.
func (p *Process) Addr(name string) string { return p.p.exposed[name] }

// Owner is the host uid and gid that jailed processes run as: files the
// host writes into the workspace for the agent should belong to them.
func (p *Process) Owner() (uid, gid int) { return p.p.s.uid, p.p.s.gid }

// Stop ends the agent: SIGTERM to every process of the jail, then, when
// ctx ends first, SIGKILL of them all. It waits until they are gone and
// the jail is released, and reports how in an agentry.jail.stopped event.
// Idempotent; safe for concurrent use.
func (p *Process) Stop(ctx context.Context) error { return p.p.stop(ctx) }

// Command returns a command confined like the agent — same mounts, same
// environment, same network (the agent's namespace) — in cwd, a path
// relative to the workspace. env adds NAME=VALUE pairs to Spec.Env. The
// caller starts and waits for it; ctx ending, the agent's jail ending, or
// Stop kills it.
func (p *Process) Command(ctx context.Context, argv []string, cwd string, env []string) (*exec.Cmd, error) {
	return p.p.command(ctx, argv, cwd, env)
}
