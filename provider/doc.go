// Package provider is the agent-provider contract: one process-local
// contract for hosting coding agents (an agentry agent, or an external one
// such as Claude Code, Codex or OpenCode behind a subprocess), so a host
// writes its lifecycle code once and each agent is adapted once.
//
//	host ─▶ Registry ─▶ Driver.Materialize(Definition) ─▶ Instance{Capabilities, Adapter, Readiness, Dispose}
//	                                                      Validated ─▶ Create / Resume / Branch ─▶ *ValidatedSession
//	                                                      ValidatedSession ─▶ RunTurn (pull iterator) · Resolve · Interrupt · Steer · Close
//
// A provider implements [Adapter] and [Session] (and the optional ports its
// [Capabilities] declare). The host never calls them directly: [Validate]
// puts an adapter behind the contract, the way database/sql puts a driver
// behind *sql.DB. The wrapper trusts nothing the adapter returns. It
// promises:
//
//   - A refused call never reaches the provider: ids, working directories,
//     configurations, inputs and host bindings are checked first.
//   - Every opening reports exactly one native identity (a [Binding]); a
//     resumed session keeps its binding and a branch gets a new one. A
//     candidate session that breaks this is closed with reason
//     contract_rejected before the error returns.
//   - Turns run one at a time and are pulled, never pushed: RunTurn returns
//     an iter.Seq2 and the provider advances only when the host pulls.
//     Each turn starts with turn.started and ends at turn.completed or
//     exactly one open request; every output names the session and the
//     turn; requests are gated by the capabilities and their ids are never
//     reused.
//   - A session the provider can no longer be trusted with (a broken
//     stream, an abandoned turn, a failure after the provider started) is
//     quarantined: everything but Close is refused with session_unusable.
//   - Close is idempotent and retryable; a failed cleanup is a
//     [*CleanupError] (or [*HostBindingCleanupError]) whose RetryCleanup
//     completes at most once and shares a concurrent attempt.
//   - Host bindings lend host tools to one session: claimed once, checked
//     against the provider's support, at most 16 invocations in flight,
//     each cancelled by its caller or by the release, results checked
//     (32 KiB of JSON), released only by the owning session after the
//     invocations in flight return. A host that lends the same tools to
//     every session may say so ahead ([Validated.ExpectHostTools]), for
//     an adapter that prepares sessions before a conversation comes
//     ([HostToolsExpecter]); each opening's binding still answers.
//   - A resumed session whose turn was waiting on a request comes back
//     waiting on it ([Pender], when Sessions.ResumePending is declared).
//   - Session interactions (questions and notices outside a turn) reach
//     the host only through the wrapper's facade, checked, bounded, and
//     ended with the session; a provider that declares none is handed
//     none.
//   - A provider's panic never reaches the host: it becomes an
//     [*OperationError].
//
// Every refusal and violation is a [*ContractError] with a stable [Code];
// match with errors.Is(err, &ContractError{Code: c}), [HasCode] or
// [CodeOf]. The package provider/conformance is the test kit every adapter
// passes, with an in-memory fake provider. The package provider/native puts
// an agentry agent behind this contract; this package's Example is a host
// driving it through the registry.
//
// An adapter for an external agent speaking the Agent Client Protocol maps
// onto the same seams: session/new and session/load are Create and Resume
// (the ACP session id is the Binding), session/prompt with its
// session/update notifications is RunTurn, session/request_permission is an
// approval request answered by Resolve, session/cancel is Interrupt, and
// the host tools a binding lends can be served to the subprocess as an MCP
// server built from [HostTools].
package provider
