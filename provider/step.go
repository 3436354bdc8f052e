package provider

import "context"

type stepCheckKey struct{}

// WithStepCheck returns a copy of ctx that carries check. A host gives the
// context of a turn (RunTurn, Resolve) one when it can stop standing
// behind the turn before the turn ends — a replica whose hold on the
// conversation may have passed to another. A provider runs it
// ([CheckStep]) before each step of the turn it takes itself: a model
// call, a tool call, a prompt to an agent process. A step whose check
// fails is not taken, and the turn stops.
//
// check must be cheap and safe for concurrent use (parallel tool calls
// run it at once).
func WithStepCheck(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, stepCheckKey{}, check)
}

// CheckStep runs the check ctx carries ([WithStepCheck]) and returns its
// error; nil when ctx carries none.
func CheckStep(ctx context.Context) error {
	if check, ok := ctx.Value(stepCheckKey{}).(func() error); ok {
		return check()
	}
	return nil
}
