package provider

import "context"

// Step names what a provider is about to do in a turn.
type Step string

const (
	// StepModel is a model call: it changes nothing outside the agent.
	StepModel Step = "model"
	// StepTool is a tool call: it may change the world.
	StepTool Step = "tool"
	// StepAgent is a prompt to an agent process, or a turn handed to
	// what runs it elsewhere (a workflow engine): whatever that does may
	// change the world.
	StepAgent Step = "agent"
)

type stepCheckKey struct{}

// WithStepCheck returns a copy of ctx that carries check. A host gives the
// context of a turn (RunTurn, Resolve) one when it can stop standing
// behind the turn before the turn ends — a replica whose hold on the
// conversation may have passed to another. A provider runs it
// ([CheckStep]) before each step of the turn it takes itself: each model
// call, each tool call, each prompt to an agent process (or, when the
// turn's steps run elsewhere, before handing the turn over). A step whose
// check fails is not taken, and the turn stops. The host may do work of
// its own before the first step that may change the world (StepTool,
// StepAgent), such as recording that the turn began.
//
// check must be safe for concurrent use (parallel tool calls run it at
// once).
func WithStepCheck(ctx context.Context, check func(Step) error) context.Context {
	return context.WithValue(ctx, stepCheckKey{}, check)
}

// CheckStep runs the check ctx carries ([WithStepCheck]) for step and
// returns its error; nil when ctx carries none.
func CheckStep(ctx context.Context, step Step) error {
	if check, ok := ctx.Value(stepCheckKey{}).(func(Step) error); ok {
		return check(step)
	}
	return nil
}
