// Package acp puts external coding agents — Claude Code, Codex, Gemini
// CLI, OpenCode, anything that speaks the Agent Client Protocol (ACP 1,
// JSON-RPC over stdio) natively or through an adapter — behind the
// agent-provider contract, on the Go ACP SDK (github.com/coder/acp-go-sdk).
//
// A [Driver] materialises instances from definitions whose configuration
// is a [Config] (the agent's argv, the environment it may see, a HOME
// template, the mode sessions start in, the hosts it may reach, the root
// of the sessions' workspaces, bounds). What an instance promises:
//
//   - One agent process per session, started by the driver's [Launcher]
//     at Create or Resume and stopped at Close, at eviction and when the
//     instance is disposed: SIGTERM, then SIGKILL of its process group
//     after the stop timeout. No agent process outlives Dispose. There is
//     no default launcher: [Jailed] (the agent profile of package jail)
//     confines agents for hosts that serve several people, and [Unjailed]
//     is the explicit single-user choice.
//   - initialize advertises fs read/write, terminals and elicitation
//     (form and URL); an env-var
//     authentication method the agent lists is used when the definition
//     gives its variables. Readiness is missing_executable,
//     missing_credentials, unsupported_version or unavailable when the
//     agent cannot be started, authenticated or understood.
//   - Create is session/new (the ACP session id is the binding); Resume is
//     session/load or session/resume, whichever the agent offers. With
//     Config.KeepHome the agent's HOME, where agents keep their memory of
//     a session, is kept beside the session's workspace and outlives the
//     process, so the reopened session has that memory. When it
//     offers neither, or refuses to reopen the binding (its memory of it
//     went with its process), a new agent session serves the conversation
//     under the same binding, and the first turn tells the person (an
//     activity) and the agent (a note) that the agent's memory is new, the
//     transcript kept (event agentry.acp.session_afresh); Close sends session/close when
//     the agent offers it. A definition's (or session's) mode is set with
//     session/set_mode, refused by name when the agent does not offer it.
//   - A turn is session/prompt: its session/update notifications become
//     text (message chunks) and activities (thoughts, tool calls and their
//     updates, plans, usage), and its stop reason ends the turn (completed;
//     cancelled is interrupted; the others are failed). A permission
//     request is an approval request whose Choices are the kinds of the
//     options the agent offered, in its order; Resolve answers it with one
//     of them (allow_once, or reject_once; a note of "always" picks the
//     *_always option), never one the agent did not offer. Interrupt is
//     session/cancel, and answers a pending permission request cancelled.
//   - Everything the agent asks of the client is bounded where it enters,
//     in front of the SDK's connection: at most limits.maxClientRequests
//     (32) of its requests in flight, and Options.MaxClientRequests (1024)
//     across the driver — past either, a JSON-RPC error at once; a request
//     that waits on a person or a command ends at limits.clientWaitTimeout.
//     An agent that floods the client (8 times its bound refused within
//     10 seconds), sends a message over 10 MiB or leaves its stdin unread
//     is cut off: stopped, reported (agentry.acp.agent_cut_off), and its
//     turn fails, so its session is quarantined.
//   - The agent's fs/read_text_file and fs/write_text_file are confined to
//     the session's working directory through an os.Root: "..", absolute
//     paths elsewhere and symbolic links out are refused, and a read opens
//     non-blocking and refuses anything but a regular file at once, each
//     call an event (agentry.acp.file, paths relative to the workspace). Its
//     terminal/* commands run through the launcher's confinement
//     (Process.Command) with capped output (truncation is flagged), each
//     call an event (agentry.acp.terminal).
//   - An elicitation/create is a question session interaction: a form of
//     one string field (its enum or oneOf consts, at most 16, as options)
//     accepts {"<field>": answer}; a URL one names the URL and any answer
//     accepts; a richer form, or a host without Interactions, is declined
//     unasked; a decline declines; the session closing cancels. Each is
//     an event (agentry.acp.elicitation, with the reason when the adapter
//     declined or cancelled by itself).
//   - The tools a host binding lends are served to the agent as an MCP
//     server (streamable HTTP on a per-session loopback listener that
//     answers only the session's secret) named in session/new; the
//     binding bounds and validates every call. With a pool (Config.Pool)
//     and the host's word on what it lends every conversation
//     (provider.HostToolsExpecter), a pooled agent's session is opened
//     ahead with its own such server listing those tools, refusing calls
//     until a conversation lending the same tools takes the agent and
//     binds its binding (agentry.acp.agent_taken; one lending others gets
//     the session opened again).
//   - An agent that exits on its own is reported (agentry.acp.agent_stopped,
//     reason exited or crashed, with the last lines of its stderr, its
//     environment's values redacted; the error says them too), and its
//     session fails its next call with a broken stream, so the validated
//     wrapper quarantines it (session_unusable).
//
// The package passes provider/conformance against a scripted ACP agent
// (the test binary, re-executed); see docs/acp.md.
package acp
