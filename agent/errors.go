package agent

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrShutdown refuses a run or resume once Shutdown has begun.
	ErrShutdown = errors.New("agent: shutting down; no new runs are accepted")
	// ErrSessionBusy refuses a run bound to a session id that another run
	// is using right now. Serialise turns per session.
	ErrSessionBusy = errors.New("agent: another run is using this session id; wait for it to finish (turns of one session run one at a time)")
	// ErrMaxIterations ends a run that reached Options.MaxIterations model
	// calls without an answer. The error that wraps it names the limit.
	ErrMaxIterations = errors.New("agent: the run reached its iteration limit")
	// ErrAlreadyResumed refuses a checkpoint this agent has already resumed.
	ErrAlreadyResumed = errors.New("agent: this checkpoint was already resumed; resume the newest checkpoint of the run")
	// ErrCheckpointAbandoned refuses a checkpoint whose pause was abandoned
	// (AbandonCheckpoint, or CloseToolSessions for its session).
	ErrCheckpointAbandoned = errors.New("agent: this checkpoint's pause was abandoned and its tool sessions closed; start a new turn")
	// ErrCheckpointInvalid is wrapped by every refusal of a malformed,
	// tampered or mismatched checkpoint.
	ErrCheckpointInvalid = errors.New("agent: checkpoint refused")
	// ErrEmptyMessage refuses a run without a message.
	ErrEmptyMessage = errors.New("agent: Input.Message is empty; pass what the person said")
	// ErrIdentityMismatch refuses continuing a conversation under an
	// identity other than the one it was started with.
	ErrIdentityMismatch = errors.New("agent: the conversation belongs to a different identity; pass the identity it was started with, or start a new conversation")
	// ErrToolConflict refuses a tool set with two tools of one name.
	ErrToolConflict = errors.New("agent: two tools share a name")
)

// CheckpointError is the refusal of a checkpoint that belongs to another
// agent or tool set, or is malformed. It names what differs.
type CheckpointError struct {
	// Field is what differs or is wrong: "version", "agent", "tools",
	// "extra tools", "mac", or a structural field.
	Field string
	// Problem says what is wrong and how to fix it.
	Problem string
	// Missing and Unexpected list tool names, for Field "tools" or
	// "extra tools".
	Missing, Unexpected []string
}

func (e *CheckpointError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent: checkpoint refused: %s: %s", e.Field, e.Problem)
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "; tools the checkpoint needs and this agent lacks: %s", strings.Join(e.Missing, ", "))
	}
	if len(e.Unexpected) > 0 {
		fmt.Fprintf(&b, "; tools this agent has that the checkpoint did not: %s", strings.Join(e.Unexpected, ", "))
	}
	return b.String()
}

// Is matches ErrCheckpointInvalid.
func (e *CheckpointError) Is(target error) bool { return target == ErrCheckpointInvalid }
