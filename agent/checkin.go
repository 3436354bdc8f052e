package agent

import "context"

// CheckInRequest is returned by a tool (see [CheckIn]) that needs a
// person's answer before it can go on. The run pauses; the call's
// call-scoped sessions stay open until the pause ends.
type CheckInRequest struct {
	Question string
}

func (e *CheckInRequest) Error() string {
	return "agent: the tool asks a person: " + e.Question
}

// CheckIn is for tools that decide mid-call that a person must approve
// what comes next: return its error from Tool.Call. The run pauses with
// the question; on approval the tool is called again with the same tool
// call id and arguments, and [DecisionFrom] reports the approval; on a
// decline the model is told, and what the call opened under the call scope
// is closed.
//
// A tool that must be approved before every call sets Spec().CheckIn
// instead, and is not run at all until a person approves.
func CheckIn(question string) error { return &CheckInRequest{Question: question} }

type decisionKey struct{}

// DecisionFrom reports the person's decision when ctx is the context of a
// call that runs because a person approved it.
func DecisionFrom(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}
