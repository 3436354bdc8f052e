package jail

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// ErrNoJail is wrapped by every refusal to launch: bubblewrap is missing,
// agentry is not root, or bubblewrap cannot build a jail here.
var ErrNoJail = errors.New("jail: cannot jail the agent")

// ErrCommand is wrapped when the agent's command cannot be found or run
// inside the jail (not on the jail's PATH, not executable, its #!
// interpreter missing).
var ErrCommand = errors.New("jail: the agent's command cannot be run")

// Defaults of [Options].
const (
	DefaultUID          = 65534 // nobody
	DefaultProcesses    = 512   // threads count: node alone has about a dozen
	DefaultOpenFiles    = 4096
	DefaultFileSize     = 1 << 30
	DefaultStartTimeout = 10 * time.Second
	DefaultDialTimeout  = 10 * time.Second
	// DefaultPath is the PATH inside the jail when Spec.Env has none.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
	// Home is where the private HOME appears inside the jail.
	Home = "/home/agent"
	// InsideUID is the agent's uid (and gid) as it sees itself.
	InsideUID = 1000
)

// Options configure a [Jail]. Zero values take the defaults.
type Options struct {
	// Bwrap is the bubblewrap program (default "bwrap" on the host's PATH).
	Bwrap string
	// UID and GID are the unprivileged host ids every jailed process runs
	// as (default 65534).
	UID, GID int
	// Dir is where each launch's private directory (HOME, /tmp, the
	// generated /etc files) is made (default os.TempDir()). It must be
	// traversable by UID.
	Dir string
	// ReadOnly lists extra host paths mounted read-only at the same place.
	ReadOnly []string
	// Processes, OpenFiles and FileSize are rlimits set on every jailed
	// process (RLIMIT_NPROC, counted per jail; RLIMIT_NOFILE;
	// RLIMIT_FSIZE in bytes).
	Processes, OpenFiles int
	FileSize             int64
	// StartTimeout bounds Launch's setup, before the agent runs.
	StartTimeout time.Duration
	// DialTimeout bounds each connection the jail makes for the agent to
	// an allowed endpoint or an exposed listener.
	DialTimeout time.Duration
	// Confiner adds the limits internal/sandbox provides (seccomp, cgroup
	// caps, size caps). Nil: they are reported as not applied.
	Confiner Confiner
}

// Spec is one agent process to launch: what the jail is told, and what
// every launcher of provider/acp is told (acp.LaunchSpec is this type).
type Spec struct {
	// Argv is the agent's command. Argv[0] is a path or a name looked up
	// on the PATH of Env (DefaultPath when Env has none).
	Argv []string
	// Env is everything the agent may see, as NAME=VALUE. The launcher
	// adds HOME (the private copy of Home) and, in the jail, the proxy
	// variables; Env cannot set those.
	Env []string
	// Workspace is an absolute host path: the agent's working directory
	// and its one writable directory (the jail binds it at the same path
	// and, when agentry runs as root, hands it to Options.UID).
	Workspace string
	// Home is a template directory copied into the private HOME ("" =
	// an empty HOME).
	Home string
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

// Confiner is the seam for the limits internal/sandbox provides. Confine
// is called once for each jailed process (the agent, then each Command);
// everything it returns is released when the agent's jail ends.
type Confiner interface {
	Confine(ctx context.Context, r ConfineRequest) (*Confinement, error)
}

// ConfineRequest says which process is being confined.
type ConfineRequest struct {
	Label string
	// Command is true for a Command, false for the agent.
	Command bool
	// FirstFD is the descriptor number bwrap sees Confinement.Files[0] at
	// (the next ones follow).
	FirstFD int
	// Agent, for a Command, is what the Confiner returned for its agent
	// (nil when it returned nothing).
	Agent *Confinement
	// Dir, for the agent only, is the launch's private directory on the
	// host while it is still empty: the jail makes HOME, /tmp and its /etc
	// files in it afterwards, so a size-capped file system mounted here
	// caps them (a Release unmounts it).
	Dir string
}

// Confinement is what a Confiner adds to one bwrap invocation.
type Confinement struct {
	// Args are extra bwrap options, e.g. "--seccomp", "5".
	Args []string
	// Files are handed to bwrap at ConfineRequest.FirstFD onwards.
	Files []*os.File
	// Attach, for the agent only, is called with the host pid of the
	// jail's first process before the agent runs (join it to a cgroup).
	Attach func(pid int) error
	// Procs, for a Command, are files its first process writes its own
	// pid to, as root, before anything of the command runs (the
	// cgroup.procs files of the agent's group, so terminals share the
	// agent's caps). For the agent they are only for the Confiner's own
	// use (Attach joins the agent).
	Procs []string
	// Applied names the limits now in force: any of the names in
	// [NotApplied].
	Applied []string
	// Release runs once the agent's jail has ended.
	Release func() error
}

// NotApplied names the limits a jail lacks without a Confiner.
var NotApplied = []string{"seccomp", "memory", "pids", "cpu", "disk"}

// Jail launches jailed agents. Safe for concurrent use.
type Jail struct {
	s   *settings
	err error
}

// New returns a Jail. Invalid options are reported by Launch.
func New(opt Options) *Jail {
	s, err := newSettings(opt)
	return &Jail{s: s, err: err}
}

// Check proves that this machine can jail an agent the way Launch does:
// bubblewrap is installed, agentry runs as root, and a jail with its own
// network namespace can be built. Success is cached.
func (j *Jail) Check(ctx context.Context) error {
	if j.err != nil {
		return j.err
	}
	return j.s.ready(ctx)
}

// Launch starts s.Argv in a new jail and returns once the agent runs.
func (j *Jail) Launch(ctx context.Context, s Spec) (*Process, error) {
	if j.err != nil {
		return nil, j.err
	}
	return j.s.launch(ctx, s)
}

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
