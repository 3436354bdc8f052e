// Package native puts an agentry agent ([*agent.Agent]) behind the
// agent-provider contract, so a host drives it with the same lifecycle code
// as any other provider: through provider.OpenRegistry, provider.Validate
// and provider.ValidatedSession.
//
// A [Driver] materialises instances; each instance builds its own agent
// from the agent.Options that [Config].Agent returns for the instance's
// definition, owns it, and shuts it down when disposed. What an instance
// promises:
//
//   - A session is a conversation bound to the host's session id. Its
//     binding (the provider's native identity) is the conversation's id:
//     128 random bits, never derived from the session id. Create and
//     Branch report a new binding; Resume reopens the stored conversation
//     and keeps its binding. Branch copies the conversation as it stood
//     after the given completed turn. Conversations are kept in a [Store]
//     (in memory by default; [HostStore] keeps them in the host's store).
//   - Every model and tool call first runs the host's step check
//     (provider.CheckStep) and looks at the run's context: a turn whose
//     host stopped standing behind it, or that was interrupted, takes no
//     further step.
//   - Identity is the host's to give, in the session configuration
//     ([SessionConfig]); absent stays nil. A conversation is resumed or
//     branched only under the identity it was created with; any other is
//     told the conversation does not exist.
//   - A turn is agent.Run (a resolution is agent.ResumeWith). Its outputs
//     are the run's events: turn.started when the agent starts the turn,
//     text for the model's text (streamed deltas when the model streams),
//     an activity when a tool is called and when it returns, and then
//     turn.completed, or an approval request when a tool pauses for a
//     person (a check-in). A run that fails at the model or at its
//     iteration limit ends at turn.completed with outcome failed; a run
//     the agent refused before it began is an error wrapping
//     provider.ErrNotStarted; a run cancelled by the host's context or by
//     the agent's shutdown is an error.
//   - The run executes inside the host's pull, on the goroutine that
//     ranges over the outputs: each event is handed to the host as the
//     agent reports it, so the agent is never ahead of what the host has
//     taken, and a turn costs no goroutine of its own.
//   - Interrupt cancels a running turn (it ends at turn.completed,
//     interrupted) or gives up a waiting one (agent.AbandonCheckpoint).
//   - A pause is kept in the conversation's record: a session resumed on
//     its binding (here, or in a process running the same agent) comes
//     back waiting on the request. Closing a waiting session with
//     CloseRequested gives the pause up; any other reason keeps it.
//   - A host binding's tools join the agent's tools for that session's
//     runs only (agent.Input.Tools, agent.ResumeOptions.Tools); another
//     session cannot see or call them. Its instructions are placed as
//     context: the first message of every run of the session, never
//     stored in the conversation.
//   - Close stops a running turn and waits for it, then closes the
//     session's tool sessions (agent.CloseToolSessions: the
//     session-scoped ones and what a pause holds). The validated wrapper
//     then releases the host binding.
//
// The package passes provider/conformance; see docs/native.md.
package native
