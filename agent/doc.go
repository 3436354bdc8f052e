// Package agent is the turn loop: it sends a conversation to a model, runs
// the tool calls the model asks for, feeds the results back, and repeats
// until the model answers, the run fails, or a tool asks for a person.
//
// There is one loop, [Loop], and it runs over an [Executor] port: the
// executor makes the model and tool calls and owns the clock, the fan-out
// of tool calls and whether the turn must stop; the loop decides
// everything else (parallel calls answered in order, check-ins before
// and inside a call, declines, failure classes, outcomes, the iteration
// bound, usage). An [*Agent] runs its turns on the in-memory executor;
// provider/durable runs the same loop as Temporal workflows. The
// agenttest package checks an executor against the loop's promises.
//
// What an [*Agent] promises:
//
//   - An [*Agent] is safe for concurrent [Agent.Run]s; per-run state lives
//     in the run. Two runs bound to the same session id at once are refused
//     with [ErrSessionBusy].
//   - Identity is never synthesised. [Input.Identity] reaches tools and
//     event meta as given; nil stays nil.
//   - The teardown firing matrix: call-scoped tool sessions close when the
//     call settles, run-scoped ones at every terminal of the run (an
//     answer, an error, a cancellation) and never at a pause, session-scoped
//     ones only through [Agent.CloseToolSessions], and everything at
//     [Agent.Shutdown]. A resume continues the same run id, so run-scoped
//     sessions opened before a pause are reused after it.
//   - No teardown tier is built until a tool first registers a cleanup.
//   - A [Checkpoint] is plain, versioned JSON that holds nothing live; it
//     resumes in another process on an agent with the same tools.
//   - Everything that happens is an event on the agent's bus, with the
//     run's meta; teardown events carry the run that opened the session.
//   - Every [Result] says what the turn used ([llm.TurnUsage]), also when
//     it failed or was cancelled.
package agent
