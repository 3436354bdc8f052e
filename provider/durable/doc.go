// Package durable runs agentry's turn loop as Temporal workflows behind the
// provider contract, so a turn outlives the process that started it.
//
// Each turn is one workflow (official SDK, go.temporal.io/sdk). Model
// calls are activities on the shared task queue with a retry policy; tool
// calls are activities on the task queue of the replica that holds the
// conversation's live tool sessions, with no automatic retry and a
// heartbeat timeout of seconds: a tool call in flight when its worker died
// is reported to the model as lost, never run again. A check-in pause is
// the workflow waiting for a signal, which Resolve sends, so a pause
// survives any restart. A replica that restarts (or another one on the
// same queues) continues a turn from the workflow's history, so a tool
// call that completed is not repeated.
//
// Conversations are kept in a native.Store shared by every replica (the
// host's SQL store); the workflow writes them, so a turn that finishes
// after its caller went away is still recorded.
package durable
