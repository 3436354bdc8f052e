// Package agenttest checks that an executor of agentry's turn loop keeps
// the loop's promises, in the spirit of testing/slogtest: one entry point,
// [Run], builds the agent under test for each check through a function
// the caller gives, runs turns through it, and reports every promise it
// breaks.
//
// The promises: a turn answers, with its conversation and its usage
// (model calls, tokens per model, tool calls by tool); tool calls of one
// response run side by side and their results go back in the order the
// model asked; a tool that waits for approval pauses the turn before it
// runs, and the resume continues the same run (approved: it runs once;
// declined: the model is told, with the note); a tool that asks a person
// mid-call pauses the turn with its call-scoped session still open, is
// called again once approved, and its session closes once; every tool
// failure is a result of its class (tool_error, panic,
// invalid_arguments, unknown_tool) and the turn goes on; the iteration
// bound and a failing model end the turn with an error of their class; a
// cancelled turn ends cancelled and closes what it opened; run-scoped
// sessions outlive a pause, are reused after it and close once at the
// real end; call-scoped ones close when their call settles.
//
// The agent package's tests run it on the in-memory executor;
// provider/durable's run it on Temporal (a real dev server).
package agenttest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// Setup is what a check asks the agent under test to be built from.
type Setup struct {
	// Model is the model every turn calls. It answers from the
	// conversation alone, so a replayed or retried call answers alike.
	Model llm.Model
	// Tools are the agent's tools; a tool whose Spec().CheckIn is set
	// waits for a person before every call.
	Tools []tool.Tool
	// MaxIterations bounds the model calls of a run (0: the default).
	MaxIterations int
	// Events must hear every event of the agent's turns (from every
	// worker that runs a step), with the turn's run id in their meta.
	Events func(event.Event)
}

// Agent is the agent under test: one conversation it runs turns in.
// Checks call it from one goroutine at a time.
type Agent interface {
	// Run runs one turn with message until it answers, fails, is
	// stopped (ctx cancelled) or pauses.
	Run(ctx context.Context, message string) Turn
	// Resume answers the pause a turn ended with, and runs on.
	Resume(ctx context.Context, paused Turn, d agent.Decision) Turn
}

// Turn is how a turn (or a resumed one) ended.
type Turn struct {
	// RunID is the run's id: the same for a turn and its resumes.
	RunID string
	// Output is the answer.
	Output string
	// Err is set when the turn failed or was stopped.
	Err error
	// Pause is set when the turn waits for a person.
	Pause *Pause
	// Messages is the conversation after an answered turn.
	Messages []llm.Message
	// Usage is what the turn used, when it did not pause: at least what
	// it used since its last pause.
	Usage llm.TurnUsage
	// Resume is whatever the Agent needs to resume a paused turn.
	Resume any
}

// Pause is a question a turn waits on.
type Pause struct {
	Question string
	Tool     string
}

// Run runs every check, each as a subtest with an agent newAgent builds
// for it. newAgent may fail the test; what it builds it cleans up with
// t.Cleanup.
func Run(t *testing.T, newAgent func(t *testing.T, s Setup) Agent) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newAgent)
		})
	}
}

type check struct {
	name string
	run  func(t *testing.T, newAgent func(*testing.T, Setup) Agent)
}

// recorder keeps the events of one check.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) add(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// of returns the events of type typ of run runID.
func (r *recorder) of(runID string, typ event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Type == typ && e.Meta.RunID == runID {
			out = append(out, e)
		}
	}
	return out
}

// classes maps each tool to the failure classes of its tool_end events
// in run runID.
func (r *recorder) classes(runID string) map[string][]string {
	out := map[string][]string{}
	for _, e := range r.of(runID, tool.TypeCallEnd) {
		p := e.Payload.(*tool.CallEnd)
		out[p.Tool] = append(out[p.Tool], p.ErrorClass)
	}
	return out
}

// outcome is the outcome of the last turn_end of run runID.
func (r *recorder) outcome(runID string) string {
	ends := r.of(runID, event.TypeTurnEnd)
	if len(ends) == 0 {
		return ""
	}
	return ends[len(ends)-1].Payload.(*event.TurnEnd).Outcome
}

// fatalClass is the class of the last fatal event of run runID.
func (r *recorder) fatalClass(runID string) string {
	fs := r.of(runID, event.TypeFatal)
	if len(fs) == 0 {
		return ""
	}
	return fs[len(fs)-1].Payload.(*event.Fatal).ErrorClass
}

// build builds the agent under test with a recorder on its events.
func build(t *testing.T, newAgent func(*testing.T, Setup) Agent, s Setup) (Agent, *recorder) {
	t.Helper()
	rec := &recorder{}
	s.Events = rec.add
	a := newAgent(t, s)
	if a == nil {
		t.Fatal("agenttest: newAgent returned nil")
	}
	return a, rec
}

// toolResults are the tool messages of a conversation since its last
// user message.
func toolResults(msgs []llm.Message) []llm.Message {
	var out []llm.Message
	for _, m := range slices.Backward(msgs) {
		if m.Role == llm.RoleUser {
			break
		}
		if m.Role == llm.RoleTool {
			out = append(out, m)
		}
	}
	slices.Reverse(out)
	return out
}
