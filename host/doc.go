// Package host is the standing host: it serves conversations with an
// agent to many people from one process, over a JSON HTTP API under /v1
// (net/http, no framework), and keeps them in a store that outlives the
// process.
//
// What it promises:
//
//   - Identity comes only from the [Authenticator] (bearer tokens from a
//     tokens file by default: digests only, compared in constant time).
//     Nothing in a body or a client-controlled header names a tenant or a
//     principal. A conversation belongs to (tenant, principal); to anyone
//     else it does not exist (404).
//   - One turn at a time per conversation (409 for a second); a message to
//     a conversation waiting for a decision is refused naming the
//     question. Bounds on turns in flight and open conversations per
//     principal answer 429 with Retry-After. Bodies are capped (413).
//     Every error is {"error": {"code", "message"}} with a stable [Code],
//     never a stack trace.
//   - Nothing is answered that is not saved: a turn's result is written to
//     the [Store] (one transaction: state, transcript, checkpoint, turn
//     log) before the response. A restart resumes conversations and
//     paused turns from the store; live tool sessions re-open.
//   - Closing a conversation (DELETE) fires its tool sessions, abandons a
//     pause it waits on, and keeps its transcript. Idle conversations
//     leave memory after a bound, their tool sessions closed with reason
//     evicted.
//   - [Host.Shutdown] refuses new requests (503, /readyz fails), lets
//     turns in flight finish within its context, cuts and records the
//     rest as failed, then shuts the engine down (every tool session
//     closed, sinks flushed) and closes the store. The package installs no
//     signal handler.
//   - Turn events stream as server-sent events in the order they were
//     emitted, ending with the result; host events (agentry.host.*) go on
//     the engine's bus; /metrics serves Prometheus text.
//   - A web console is served at / (files embedded in the binary, under a
//     strict Content-Security-Policy, unless Options.NoConsole); it reads
//     only the authenticated API, with its 404-for-others rule. Every
//     answer carries nosniff and a policy that forbids framing.
package host
