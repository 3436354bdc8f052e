// Package durable runs agentry's turn loop as Temporal workflows behind the
// provider contract, so a turn outlives the process that started it.
//
// It is an executor of the one loop, not a loop of its own: each turn is
// one workflow (official SDK, go.temporal.io/sdk) that runs agent.Loop
// over an agent.Executor whose steps are activities, whose clock is the
// workflow's and whose tool calls fan out as activity futures — so the
// loop is deterministic under replay, and a durable turn behaves as an
// in-memory one: tool calls of one response run side by side and answer
// in order, a tool may ask a person mid-call (tool.CheckIn), failures
// have the loop's classes, and the turn's result carries its usage. The
// package's tests run agent/agenttest against it on a real Temporal
// server.
//
// Tool calls are activities (each through tool.Invoke) on the task queue
// of the replica that holds the session (its live tool sessions, its lent
// host tools, its caller), with no automatic retry and a heartbeat
// timeout of seconds: a tool call in flight when its worker died is
// reported to the model as lost, never run again. Model calls are
// activities with a retry policy and a heartbeat; each first waits up to
// Config.PinnedStart for the session's replica to take it, and goes to
// the shared task queue (any replica) when it does not. A pause is the
// workflow waiting for a signal, which Resolve sends, so a pause survives
// any restart; the loop then goes on from where it stood. A replica that
// restarts (or another one on the same queues) continues a turn from the
// workflow's history, so a tool call that completed is not repeated.
//
// Outputs are streamed as the turn runs, as a live view: an activity that
// runs on the replica where the turn's caller follows it hands its outputs
// to the caller as it makes them — the model's text once the model call
// returns (whole, never token by token: a model call may be retried, and
// the deltas of a failed attempt could not be taken back), and each tool
// call's start and end, phrased as native turns phrase them. The
// workflow's history stays the truth: the turn's result lists every step,
// and what the live view did not give (an activity that ran on another
// replica, an output the caller did not take within the heartbeat
// timeout, a call lost with its worker) is given when the turn stops. A
// caller on another replica, or gone, simply gets no live view.
//
// Host bindings are honoured as native sessions honour them: the
// validated wrapper claims the binding once and enforces the in-flight
// and result-size limits; the lent tools are offered to the model of that
// session's turns only and called by the tool activity on the replica
// that holds the session; instructions are placed as context before
// every model call and never stored; Close releases the binding. A lent
// tool whose session is not open on the replica that runs the call is
// reported to the model as unknown there.
//
// Agent events (agentry.agent.turn_start and turn_end, agentry.llm.*,
// agentry.tool.*, agentry.tools.*, agentry.pause.*) go to Config.Events
// from the replica that ran each activity, with the turn id as run id;
// they carry key digests, never a key or a secret. A mark activity on the
// session's replica closes the turn's run-scoped tool sessions and emits
// its turn_end, so `agentry events audit` reads a replica's events file
// as it reads a native one's.
//
// A turn under its caller's limit (TurnRequest.Limit, Resolution.Limit: a
// host's budget) asks it before each model call after the first through
// a limit activity on the session's replica, where the caller holds it,
// with what the turn used across its pauses; the answer is that
// activity's result, so replay never reads a clock or a store. A crossing
// ends the turn as the loop ends it everywhere: the step finishes, then
// one model call with tool calls withheld. A limit that cannot be asked
// counts as crossed.
//
// Conversations are kept in a native.Store shared by every replica (the
// host's SQL store); the workflow writes them, so a turn that finishes
// after its caller went away is still recorded.
package durable
