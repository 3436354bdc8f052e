package acp

import "github.com/agentry-dev/agentry/event"

// The events the adapter emits about the agent processes it runs and the
// client calls they make. Each has one payload struct below, sent as a
// pointer; init registers them with package event.
const (
	TypeAgentStarted event.Type = "agentry.acp.agent_started"
	TypeAgentStopped event.Type = "agentry.acp.agent_stopped"
	TypeFile         event.Type = "agentry.acp.file"
	TypeTerminal     event.Type = "agentry.acp.terminal"
	// An elicitation an agent sent (elicitation/create) and how it was
	// answered.
	TypeElicitation event.Type = "agentry.acp.elicitation"
	// An agent the client stopped for what it did to the client: it
	// flooded it with requests, sent a message over the size limit, or
	// left what the client sent it unread.
	TypeAgentCutOff event.Type = "agentry.acp.agent_cut_off"
	// A conversation reopened (after a restart or an eviction) whose agent
	// could not resume its session: a new agent session took its place,
	// the agent's memory new, the conversation's transcript kept.
	TypeSessionAfresh event.Type = "agentry.acp.session_afresh"
	// An agent of the warm pool (Config.Pool) that is ready to be taken:
	// started, initialised, authenticated and its session opened.
	TypeAgentPooled event.Type = "agentry.acp.agent_pooled"
	// A pooled agent a new conversation took, and whether the session
	// opened ahead was kept or had to be opened again.
	TypeAgentTaken event.Type = "agentry.acp.agent_taken"
)

func init() {
	event.Register(TypeAgentStarted, func() any { return new(AgentStarted) })
	event.Register(TypeAgentStopped, func() any { return new(AgentStopped) })
	event.Register(TypeFile, func() any { return new(FileEvent) })
	event.Register(TypeTerminal, func() any { return new(TerminalEvent) })
	event.Register(TypeElicitation, func() any { return new(ElicitationEvent) })
	event.Register(TypeAgentCutOff, func() any { return new(AgentCutOff) })
	event.Register(TypeSessionAfresh, func() any { return new(SessionAfresh) })
	event.Register(TypeAgentPooled, func() any { return new(AgentPooled) })
	event.Register(TypeAgentTaken, func() any { return new(AgentTaken) })
}

// SessionAfresh is the payload of [TypeSessionAfresh].
type SessionAfresh struct {
	// Why the agent could not resume: it offers neither session/load nor
	// session/resume, or it refused to reopen the session (its error).
	Why string `json:"why"`
}

// AgentPooled is the payload of [TypeAgentPooled].
type AgentPooled struct {
	// Label is the launcher's name for the process, as in its
	// [AgentStarted].
	Label string `json:"label"`
	// TookMs is how long its preparation took, from the launch to its
	// session opened: what a conversation that takes it does not wait.
	TookMs float64 `json:"tookMs"`
	// Waiting is how many agents the pool holds with this one.
	Waiting int `json:"waiting"`
	// HostTools names the host tools its session's MCP server lists (the
	// ones the host lends every conversation); empty: it was opened
	// without MCP servers.
	HostTools []string `json:"hostTools,omitempty"`
}

// AgentTaken is the payload of [TypeAgentTaken], sent with the session id
// of the conversation that took the agent.
type AgentTaken struct {
	// Label is the launcher's name for the process.
	Label string `json:"label"`
	// Reopened, when set, says why the session opened ahead did not fit
	// the conversation, which then paid for a session/new: it lends host
	// tools other than those the session lists, or lends none while the
	// session lists some. Empty: the session opened ahead was taken as it
	// was.
	Reopened string `json:"reopened,omitempty"`
}

// AgentStarted reports an agent process a launcher started for one
// session.
type AgentStarted struct {
	// Label is the launcher's non-secret name for the process (a hash).
	Label string `json:"label"`
	// Launcher names the launcher ("unjailed", "jail").
	Launcher string `json:"launcher"`
	// Confined is false when nothing but the process's own user stands
	// between the agent and the machine (the unjailed launcher).
	Confined bool    `json:"confined"`
	Pid      int     `json:"pid,omitempty"`
	TookMs   float64 `json:"tookMs"`
}

// AgentStopped reports an agent process that ended.
type AgentStopped struct {
	Label string `json:"label"`
	// Reason is "stopped" (asked to), "exited" (on its own) or "crashed"
	// (on its own, with a failure).
	Reason string `json:"reason"`
	// Forced is true when it had to be killed after the grace period.
	Forced   bool    `json:"forced,omitempty"`
	ExitCode *int    `json:"exitCode,omitempty"`
	Signal   string  `json:"signal,omitempty"`
	HeldMs   float64 `json:"heldMs"`
	Error    string  `json:"error,omitempty"`
	// Stderr, for an agent that ended on its own, is the last lines it
	// wrote to its standard error (joined with " | "), every value of its
	// environment of four bytes or more replaced by <NAME>.
	Stderr string `json:"stderr,omitempty"`
}

// FileEvent reports one fs/read_text_file or fs/write_text_file call an
// agent made. Path is relative to the session's workspace; a refused
// path is not repeated.
type FileEvent struct {
	Op      string `json:"op"` // read, write
	Path    string `json:"path,omitempty"`
	Bytes   int    `json:"bytes"`
	Refused bool   `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
}

// TerminalEvent reports one terminal/* call an agent made. Command is the
// program's base name only, never its arguments; Cwd is relative to the
// workspace.
type TerminalEvent struct {
	Op         string `json:"op"` // create, output, wait_for_exit, kill, release
	TerminalID string `json:"terminalId,omitempty"`
	Command    string `json:"command,omitempty"`
	Cwd        string `json:"cwd,omitempty"`
	ExitCode   *int   `json:"exitCode,omitempty"`
	Signal     string `json:"signal,omitempty"`
	Bytes      int    `json:"bytes,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	Refused    bool   `json:"refused,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ElicitationEvent reports one elicitation/create an agent sent: its mode
// ("form" or "url"), the session interaction it became (none when it was
// declined before the person was asked), and its outcome ("accepted",
// "declined" or "cancelled"). Reason says why the adapter declined or
// cancelled it by itself; it never quotes the agent's message, the URL or
// the person's answer.
type ElicitationEvent struct {
	Mode          string `json:"mode"`
	InteractionID string `json:"interactionId,omitempty"`
	Fields        int    `json:"fields"`
	Options       int    `json:"options,omitempty"`
	Outcome       string `json:"outcome"`
	Reason        string `json:"reason,omitempty"`
}

// AgentCutOff reports an agent the client stopped. Reason is "flood"
// (Refused of its requests were refused within the flood window, past its
// bound of Limit in flight), "oversized_message" or "stalled_input".
type AgentCutOff struct {
	Label   string `json:"label"`
	Reason  string `json:"reason"`
	Refused int    `json:"refused,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Error   string `json:"error"`
}
