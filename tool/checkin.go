package tool

import "context"

// CheckInRequest is the error a tool returns (see [CheckIn]) when it needs
// a person's answer before it can go on.
type CheckInRequest struct {
	Question string
}

func (e *CheckInRequest) Error() string {
	return "tool: the call asks a person: " + e.Question
}

// CheckIn is for a tool that decides mid-call that a person must approve
// what comes next: return its error from Tool.Call. A door that can ask
// (the agent loop, a durable turn) pauses the run with the question and
// keeps the call's call-scoped sessions open; on approval it calls the
// tool again with the same tool call id and arguments, and [ApprovalFrom]
// reports the approval; on a decline the model is told, and what the call
// opened under the call scope is closed. A door that cannot ask (MCP, a
// lent host tool) answers the call as declined.
//
// A tool that must be approved before every call sets Spec().CheckIn
// instead, and is not run at all until a person approves.
func CheckIn(question string) error { return &CheckInRequest{Question: question} }

// Approval is a person's approval of a call that waited for one.
type Approval struct {
	// Note is what the person added, if anything.
	Note string `json:"note,omitempty"`
}

type approvalKey struct{}

// ApprovalFrom reports the approval when ctx is the context of a call that
// runs because a person approved it.
func ApprovalFrom(ctx context.Context) (Approval, bool) {
	a, ok := ctx.Value(approvalKey{}).(Approval)
	return a, ok
}
