package host

import (
	"context"
	"errors"
	"time"

	"github.com/agentry-dev/agentry/agent"
)

// Store keeps conversations: who owns them, their transcript, their state,
// the checkpoint of a paused turn, and a log of turns. It is what survives
// a restart of the host. Implementations must be safe for concurrent use.
//
// Every read takes the owner: a conversation of another owner is
// [ErrNotFound], so no caller can forget to check.
type Store interface {
	// Create stores a new conversation (Version 0). An id that exists is
	// refused.
	Create(ctx context.Context, c Conversation) error
	// Load returns the conversation with its transcript, without its
	// checkpoint.
	Load(ctx context.Context, owner Owner, id string) (Conversation, error)
	// Info is Load without the transcript (Transcript is nil).
	Info(ctx context.Context, owner Owner, id string) (Conversation, error)
	// Save writes what one turn (or a close) changed, in one transaction:
	// the conversation's new state, the messages its transcript gained (a
	// transcript only grows; nil leaves it as stored), its checkpoint (set,
	// or cleared when nil) and a turn record. It refuses with
	// [ErrConflict] when the stored version is not
	// u.Conversation.Version, and returns the new version.
	Save(ctx context.Context, u Update) (version int64, err error)
	// LoadCheckpoint returns the checkpoint of a paused conversation, or
	// ErrNotFound when it has none.
	LoadCheckpoint(ctx context.Context, owner Owner, id string) ([]byte, error)
	// List returns the owner's conversations, newest first, without their
	// transcripts.
	List(ctx context.Context, owner Owner, opt ListOptions) ([]Conversation, error)
	// CountOpen counts the owner's conversations that are not closed.
	CountOpen(ctx context.Context, owner Owner) (int, error)
	// Turns returns a conversation's turn log, oldest first.
	Turns(ctx context.Context, owner Owner, id string) ([]Turn, error)
	// Ping reports whether the store can be reached.
	Ping(ctx context.Context) error
	// Close releases the store. Safe to call twice.
	Close() error
}

var (
	// ErrNotFound: no such conversation for this owner (or no checkpoint).
	ErrNotFound = errors.New("host: no such conversation")
	// ErrConflict: the conversation changed since it was read (another
	// replica, or a concurrent request); read it again.
	ErrConflict = errors.New("host: the conversation changed since it was read; retry the request")
	// ErrExists: Create was given an id that is taken.
	ErrExists = errors.New("host: a conversation with this id exists")
)

// Owner is who a conversation belongs to: a principal within a tenant.
// It comes only from the authenticator.
type Owner struct {
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
}

// State is where a conversation is.
type State string

const (
	// StateOpen: ready for a message.
	StateOpen State = "open"
	// StatePaused: a turn waits for a person's decision.
	StatePaused State = "paused"
	// StateClosed: closed; the transcript is kept, nothing more runs.
	StateClosed State = "closed"
)

// Pending is the question a paused conversation waits on.
type Pending struct {
	Question string `json:"question"`
	Tool     string `json:"tool"`
}

// Conversation is a hosted conversation as the store keeps it.
type Conversation struct {
	ID    string
	Owner Owner
	State State
	// Turns counts the messages that ran (answered, paused or failed).
	Turns int
	// Transcript is the conversation so far (nil before the first answer).
	Transcript *agent.Conversation
	// Pending is set exactly when State is StatePaused.
	Pending *Pending
	// LastRunID is the run of the last turn.
	LastRunID string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Version counts saves; Save checks it (optimistic concurrency).
	Version int64
}

// Update is what one Save writes.
type Update struct {
	// Conversation is the new state; its Version is the one that was read.
	Conversation Conversation
	// Checkpoint is the paused turn's checkpoint (JSON); nil clears it.
	Checkpoint []byte
	// Turn, when set, is appended to the turn log.
	Turn *Turn
}

// Turn outcomes in the turn log.
const (
	TurnAnswered  = "answered"
	TurnPaused    = "paused"
	TurnFailed    = "failed"
	TurnCut       = "cut"       // cut by the shutdown drain bound
	TurnAbandoned = "abandoned" // a pause given up (evicted or closed)
	TurnClosed    = "closed"    // the conversation was closed
)

// Turn is one entry of a conversation's turn log: facts, not content.
type Turn struct {
	// Seq numbers the entries of one conversation from 1; the store sets it.
	Seq   int64  `json:"seq"`
	RunID string `json:"runId,omitempty"`
	// Kind is "message", "decision", "close" or "evict".
	Kind    string    `json:"kind"`
	Outcome string    `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

// ListOptions narrow List.
type ListOptions struct {
	// OpenOnly leaves out closed conversations.
	OpenOnly bool
	// Limit bounds the answer (default and maximum 1000).
	Limit int
}

const maxList = 1000
