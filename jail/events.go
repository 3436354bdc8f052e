package jail

import "github.com/agentry-dev/agentry/event"

// The events the jail and the runners built on it emit. Each has one
// payload struct below, sent as a pointer; init registers them with the
// event package, so a program that links the jail reads them back from an
// events file into these structs.
const (
	// TypeStarted: a jailed agent started; what confines it, and by name
	// what does not.
	TypeStarted event.Type = "agentry.jail.started"
	// TypeRefused: a connection the agent's jail refused.
	TypeRefused event.Type = "agentry.jail.connection_refused"
	// TypeStopped: a jailed agent ended.
	TypeStopped event.Type = "agentry.jail.stopped"
	// TypeRunnerLimits: a code runner's statement, once at its start, of
	// what its sessions get and what this machine cannot give them.
	TypeRunnerLimits event.Type = "agentry.runner.limits"
	// TypeRunnerSwept: leftovers of dead processes removed at a start
	// (session directories and their mounts, control groups, remote
	// sessions).
	TypeRunnerSwept event.Type = "agentry.runner.swept"
)

func init() {
	event.Register(TypeStarted, func() any { return new(Started) })
	event.Register(TypeRefused, func() any { return new(Refused) })
	event.Register(TypeStopped, func() any { return new(Stopped) })
	event.Register(TypeRunnerLimits, func() any { return new(RunnerLimits) })
	event.Register(TypeRunnerSwept, func() any { return new(RunnerSwept) })
}

// Started reports a jailed agent process that started: what confines it
// and, by name, what does not.
type Started struct {
	Label string `json:"label,omitempty"`
	// UID is the unprivileged host user the agent runs as.
	UID int `json:"uid"`
	// Applied and NotApplied name the limits, comma-separated
	// ("seccomp,memory,pids,cpu,disk").
	Applied    string `json:"applied"`
	NotApplied string `json:"notApplied,omitempty"`
	// AllowHosts are the host:port pairs it may reach and Exposed the
	// names of the host listeners it was given, comma-separated.
	AllowHosts string  `json:"allowHosts,omitempty"`
	Exposed    string  `json:"exposed,omitempty"`
	StartMs    float64 `json:"startMs"`
}

// Refused reports a connection the jail refused: through its egress
// proxy, or dialled directly to a port nobody is allowed.
type Refused struct {
	Label string `json:"label,omitempty"`
	// Target is the host:port asked for.
	Target string `json:"target"`
	// Via is "proxy" or "direct".
	Via    string `json:"via"`
	Reason string `json:"reason"`
	// Suppressed counts refusals before this one that the event bound
	// held back (a port scan); a last event with no Target carries the
	// remainder when the jail ends.
	Suppressed int `json:"suppressed,omitempty"`
}

// Stopped reports a jailed agent process that ended.
type Stopped struct {
	Label string `json:"label,omitempty"`
	// How is "exited" (on its own), "terminated" (SIGTERM at Stop) or
	// "killed" (SIGKILL of the whole jail when Stop's deadline ended).
	How      string  `json:"how"`
	ExitCode *int    `json:"exitCode,omitempty"`
	TookMs   float64 `json:"tookMs"`
	Error    string  `json:"error,omitempty"`
}

// RunnerLimits is a code runner's statement, once at its start, of the
// limits its sessions get and of those this machine cannot give them.
type RunnerLimits struct {
	RunnerID    string   `json:"runnerId"`
	Description string   `json:"description"`
	Applied     []string `json:"applied"`
	NotApplied  []Gap    `json:"notApplied,omitempty"`
}

// Gap is a limit a jail cannot apply on this machine, and why. A jail
// states its gaps at start (in a runner's description and its
// agentry.runner.limits event, in every agentry.jail.started event)
// rather than run without them quietly.
type Gap struct {
	Limit string `json:"limit"` // "memory cap", "disk cap", …
	Why   string `json:"why"`
}

// RunnerSwept reports one sweep of what processes that no longer exist
// left behind: session directories (and the tmpfs mounted in them),
// control groups, remote sessions.
type RunnerSwept struct {
	// RunnerID names who swept: a code runner's id, or "agent-jail" for
	// the agent jail.
	RunnerID string `json:"runnerId"`
	What     string `json:"what"` // "session-dirs", "cgroups", "remote-sessions"
	Removed  int    `json:"removed"`
	// Owners are the pids of the dead processes whose leftovers went.
	Owners []int  `json:"owners,omitempty"`
	Failed int    `json:"failed,omitempty"`
	Error  string `json:"error,omitempty"`
}
