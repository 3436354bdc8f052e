package acp

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"strings"

	"github.com/agentry-dev/agentry/jail"
)

// Launcher is the process seam: it starts the agent process of one
// session, confined however the launcher confines. The adapter refuses to
// run without one; [Jailed] (package jail) is the launcher
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

// Process is one running agent process. A Process that also has a
// method StderrTail() string (the last few KiB the agent wrote to its
// standard error; both launchers here have it) lets an agent that ends on
// its own be reported with the last lines it wrote there, its
// environment's values redacted.
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

// stderrTailer is a Process that keeps the end of the agent's stderr.
type stderrTailer interface{ StderrTail() string }

// Bounds on what of an agent's stderr is kept and reported.
const (
	stderrTailBytes = 8 << 10 // what the unjailed launcher keeps, as the jail does
	stderrLines     = 5
	stderrLineMax   = 150
	minRedactBytes  = 4 // shorter values are not secrets, and are everywhere
)

// lastWords returns the last lines p's agent wrote to its standard error,
// joined with " | ", every value of env (NAME=VALUE) of at least four
// bytes replaced by <NAME>; "" when p keeps none or there were none.
func lastWords(p Process, env []string) string {
	t, ok := p.(stderrTailer)
	if !ok {
		return ""
	}
	tail := t.StderrTail()
	if len(tail) >= stderrTailBytes/2 {
		// The tail may begin mid-line, and so mid-value, where a value
		// cannot be recognised: its first line is left out.
		_, tail, _ = strings.Cut(tail, "\n")
	}
	text := redactEnv(tail, env)
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	lines = lines[max(len(lines)-stderrLines, 0):]
	for i, l := range lines {
		if len(l) > stderrLineMax {
			lines[i] = strings.ToValidUTF8(l[:stderrLineMax], "") + "…"
		}
	}
	return strings.Join(lines, " | ")
}

// redactEnv replaces every value of env of at least minRedactBytes in
// text by <NAME>, longest first, so no value shows, whole, in what
// is reported.
func redactEnv(text string, env []string) string {
	type kv struct{ name, value string }
	var vals []kv
	for _, e := range env {
		name, value, ok := strings.Cut(e, "=")
		if ok && len(value) >= minRedactBytes {
			vals = append(vals, kv{name, value})
		}
	}
	slices.SortStableFunc(vals, func(a, b kv) int { return len(b.value) - len(a.value) })
	pairs := make([]string, 0, 2*len(vals))
	for _, v := range vals {
		pairs = append(pairs, v.value, "<"+v.name+">")
	}
	return strings.NewReplacer(pairs...).Replace(text)
}
