// Package mcpserve serves agentry tools over the Model Context Protocol,
// with the official Go SDK, on stdio and on streamable HTTP.
//
// It is a door, like the agent loop, but a narrow one. A call served here
// is one call and nothing more, so the [tool.Call] a tool receives has:
//
//   - a fresh ToolCallID, unique to this call;
//   - an empty RunID and SessionID: there is no run and no conversation;
//   - a nil Identity, unless the HTTP handler's authenticator proved a user
//     (stdio never has one);
//   - Scopes == [call]. A tool asking OnTeardown for any wider scope is
//     refused by name, and the refusal reaches the client as an error result.
//
// Call-scoped cleanups fire when the call settles — it answered, failed,
// panicked or the client cancelled it — each bounded by the teardown
// timeout. Every close is reported: as a session_closed or
// session_close_failed event to the configured sink and hook, and every
// failure or timeout also to OnError. Nothing that goes wrong is silent.
//
// The door builds no teardown tier until a tool registers a cleanup.
// Each call goes through [tool.Invoke], as in every door: arguments are
// validated against the tool's input schema before the tool runs, a
// failure is an error result of its class, a panicking tool becomes an
// error result (the panic, a *toolsession.PanicError with the stack, goes
// to OnError, never to the client), and a tool that asks a person
// ([tool.CheckIn]) is answered as declined: nobody can be asked here.
// [Server.Shutdown]
// stops serving, waits (bounded) for calls in flight and fires everything
// still held. A [Server] is safe for concurrent use.
package mcpserve
