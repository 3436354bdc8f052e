// Package toolsession is the teardown tier for tools that hold live
// sessions: a code interpreter, a browser, a remote sandbox.
//
// A tool registers a cleanup under an isolation key (see [Key]) and is told,
// exactly once and within a deadline, when the session is over: at the end
// of the call, of the run, of the hosted conversation, at shutdown, when it
// has been idle too long, or when the tier is full and it is the coldest.
//
// A [Tier] keeps seven promises:
//
//  1. A registration is closed at most once, even when firings race.
//  2. Registering twice under the same (tool, scope, key) keeps the first
//     cleanup and counts the second as a reuse.
//  3. The cleanups of one firing are launched newest-first and run
//     concurrently; the firing waits for all of them.
//  4. Every cleanup is bounded by [Config.Timeout]; one that ignores its
//     context is abandoned and reported as a [*TimeoutError].
//  5. Nothing panics or errors into the caller, and nothing is silent: every
//     close, failure, timeout and recovered panic is reported.
//  6. A session the far side already reaped is the adapter's success.
//  7. Nothing live is persisted; the tier holds only in-memory handles.
//
// A call in flight pins the registration it uses with a [Lease] from
// [Tier.Hold]: the MaxLive bound and the idle sweep take only idle
// registrations, so a session is never cut under running code. A Lease
// taken before the session exists reserves its room, so nothing is started
// without a slot; when every live session is busy, Hold waits up to
// [Config.Wait] and then refuses with a [*CapacityError] (errors.Is
// [ErrCapacity]).
//
// Only [HashKey] of a key ever appears in a [Report].
//
// The package imports nothing else from agentry.
package toolsession
