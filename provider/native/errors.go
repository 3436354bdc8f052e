package native

import "errors"

// Refusals of a session opening. The validated wrapper reports them as a
// *provider.OperationError wrapping one of these (errors.Is works).
var (
	// ErrConversationNotFound refuses a resume or branch whose binding
	// names no stored conversation for the session's identity. A
	// conversation of another identity is refused with this same error, so
	// a binding reveals nothing about conversations that are not yours.
	ErrConversationNotFound = errors.New("native: no conversation with that binding for this identity; create a new session, or resume under the identity the conversation was created with")
	// ErrConversationOpen refuses resuming a conversation another open
	// session of the instance holds: two sessions writing one conversation
	// would lose turns.
	ErrConversationOpen = errors.New("native: the conversation is open in another session; close that session first, or branch it")
	// ErrSessionIDInUse refuses opening a session with the id of one that
	// is open in the instance: the id keys the agent's session-scoped tool
	// sessions, so two sessions must not share it.
	ErrSessionIDInUse = errors.New("native: a session with this id is open in the instance; close it first, or use another session id")
	// ErrTurnNotFound refuses a branch through a turn the source
	// conversation has not completed.
	ErrTurnNotFound = errors.New("native: the source conversation has no completed turn with that id; branch through a turn that reached turn.completed")
	// ErrHostToolConflict refuses a host binding that lends a tool with
	// the name of one of the agent's own tools.
	ErrHostToolConflict = errors.New("native: a host tool has the name of one of the agent's tools; rename the host tool")
)
