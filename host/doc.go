// Package host is the standing host: it serves conversations with agents
// to many people from one process, over a JSON HTTP API under /v1
// (net/http, no framework), and keeps them in a store that outlives the
// process. It drives agents only through the provider contract (package
// provider): each conversation is one provider.ValidatedSession, opened
// with Create on its first turn and re-opened with Resume from the binding
// in the store after a restart or an eviction; a turn is RunTurn, a
// decision is Resolve, a cancel, the turn timeout and a drain cut are
// Interrupt, and a close, an eviction or a shutdown is Close. It imports no agent and links no database
// driver: the SQL stores are in host/sqlstore.
//
// What it promises:
//
//   - Identity comes only from the [Authenticator]: bearer tokens from a
//     tokens file ([Tokens]: digests only, compared in constant time),
//     bearer JWTs from an OpenID provider ([OIDC]), or both in a [Chain].
//     Nothing in a body or a client-controlled header names a tenant, a
//     principal or a role. A conversation belongs to (tenant, principal);
//     to anyone else it does not exist (404) — except to an admin of its
//     tenant ([Caller.AdminOf]), who reads its metadata and may close it
//     under /v1/tenants/{tenant}/sessions. A provider that cannot be
//     reached to check a token answers 503 identity_unavailable, never
//     401.
//   - One turn at a time per conversation (409 for a second); a message to
//     a conversation waiting for a decision is refused naming the
//     question. Bounds on turns in flight and open conversations per
//     principal answer 429 with Retry-After. Bodies are capped (413).
//     Every error is {"error": {"code", "message"}} with a stable [Code],
//     never a stack trace.
//   - Nothing is answered that is not saved: a turn's result is written to
//     the [Store] (one transaction: state, transcript, binding, pending
//     request, turn log) before the response. A restart resumes
//     conversations and paused turns from their bindings.
//   - Every turn is bounded (Options.TurnTimeout: timed_out) and can be
//     stopped (POST …/cancel: cancelled), running or paused; a provider
//     that does not end an interrupted turn has its context cancelled and
//     its session closed. Nothing waits on an agent without a bound.
//   - Closing a conversation (DELETE) cancels a turn running on it, closes
//     its provider session and keeps its transcript. Idle conversations leave memory after a bound,
//     their sessions closed with reason evicted. A close that fails is
//     recorded and retried (RetryCleanup) until it succeeds or the host
//     stops — never dropped.
//   - Among replicas ([Options].Leases), a replica never acts for a
//     conversation it may have lost: each turn runs under its lease's
//     deadline, checked before every step the provider takes
//     (provider.CheckStep) and before its store writes, and is cut, its
//     session closed, when the deadline passes; every write carries the
//     lease epoch, which the store checks ([ErrFenced]); a turn cut so is
//     recorded lost and its client told turn_lost. Providers keep their
//     own records in the host's store through the [Records] port, in the
//     transaction that saves the turn ([SaveRecord]).
//   - [Options].HostTools are lent to every session through a host
//     binding, each call one call with the conversation's identity.
//   - A person's standing [Rule]s (made with a decision, listed at
//     GET /v1/rules, revoked with DELETE /v1/rules/{id}) answer their own
//     matching approval requests without asking, for every provider; each
//     answer is a turn-log entry and an event naming the rule, written
//     before the answer goes. Another person's request is never answered
//     by them.
//   - [Host.Shutdown] refuses new requests (503, /readyz fails), lets
//     turns in flight finish within its context, interrupts, cuts and
//     records the rest as failed, then closes every provider session,
//     retries failed cleanups once more and closes the store. The
//     provider's registry is its owner's to dispose. The package installs
//     no signal handler.
//   - Turn events and the provider's outputs stream as server-sent
//     events in order, ending with the result; host events
//     (agentry.host.*) go on the host's bus; /metrics serves Prometheus
//     text.
//   - A web console is served at / (files embedded in the binary, under a
//     strict Content-Security-Policy, unless Options.NoConsole); it reads
//     only the authenticated API, with its 404-for-others rule. Every
//     answer carries nosniff and a policy that forbids framing.
package host
