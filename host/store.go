package host

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Store keeps conversations: who owns them, which provider holds each and
// under which native identity (its [provider.Binding]), their transcript,
// their state, the request a paused turn waits on, and a log of turns. It
// is what survives a restart of the host. Implementations must be safe for
// concurrent use; the package host/sqlstore has SQLite and PostgreSQL ones.
//
// Every read takes the owner: a conversation of another owner is
// [ErrNotFound], so no caller can forget to check. The two reads for a
// tenant's admins (ListTenant, TenantInfo) take the tenant instead: a
// conversation of another tenant is not found. An owner is a
// [tool.Identity] with Tenant and Principal set and no ConversationID.
type Store interface {
	// Create stores a new conversation (Version 0, no messages). An id
	// that exists is refused with ErrExists.
	Create(ctx context.Context, c Conversation) error
	// Load returns the conversation with its transcript.
	Load(ctx context.Context, owner tool.Identity, id string) (Conversation, error)
	// Info is Load without the transcript (Transcript is nil; Messages
	// still counts them).
	Info(ctx context.Context, owner tool.Identity, id string) (Conversation, error)
	// Save writes what one turn (or a close) changed, in one transaction:
	// the conversation's new state, the messages its transcript gained
	// (u.Append, after the u.Conversation.Messages already stored) and a
	// turn record. It refuses with [ErrConflict] when the stored version
	// is not u.Conversation.Version, and returns the new version.
	Save(ctx context.Context, u Update) (version int64, err error)
	// AppendTurn adds an entry to a conversation's turn log and changes
	// nothing else (its version stays).
	AppendTurn(ctx context.Context, owner tool.Identity, id string, t Turn) error
	// BeginTurn records that a turn began on the conversation, under the
	// lease epoch given: the conversation shows it (Conversation.Begun)
	// until its next Save, so a replica that takes the conversation over
	// learns that a turn was in flight. It refuses with [ErrFenced] when a
	// newer epoch has written the conversation, and with
	// [ErrForwardVoided] when b.Forward names a forwarded request its
	// forwarder gave up on (VoidForward). A zero b clears the record (the
	// turn begun did not start after all).
	BeginTurn(ctx context.Context, owner tool.Identity, id string, epoch int64, b Begun) error
	// VoidForward records that the replica which forwarded the request
	// forward gave up waiting for it, so it never begins (BeginTurn
	// refuses it from now on). began reports that it had begun already:
	// then nothing is voided.
	VoidForward(ctx context.Context, owner tool.Identity, id, forward string) (began bool, err error)
	// List returns the owner's conversations, newest first (by creation,
	// then id), without their transcripts; opt.After starts after a
	// cursor.
	List(ctx context.Context, owner tool.Identity, opt ListOptions) ([]Conversation, error)
	// ListTenant returns a tenant's conversations, every principal's,
	// newest first, without their transcripts: what the tenant's admins
	// read ([Caller.AdminOf]).
	ListTenant(ctx context.Context, tenant string, opt ListOptions) ([]Conversation, error)
	// TenantInfo is Info for the tenant's admins: the conversation, with
	// its owner, when it belongs to tenant; ErrNotFound otherwise.
	TenantInfo(ctx context.Context, tenant, id string) (Conversation, error)
	// CountOpen counts the owner's conversations that are not closed.
	CountOpen(ctx context.Context, owner tool.Identity) (int, error)
	// Turns returns a conversation's turn log, oldest first.
	Turns(ctx context.Context, owner tool.Identity, id string) ([]Turn, error)
	// UsageRecords returns the usage records q selects, oldest first.
	UsageRecords(ctx context.Context, q UsageQuery) ([]UsageRecord, error)
	// UsageTotal sums the usage of a tenant's turns (one principal's when
	// principal is set) that ended at or after since.
	UsageTotal(ctx context.Context, tenant, principal string, since time.Time) (UsageTotal, error)
	// AddRule stores a standing approval (see [Rule]) unless its owner
	// has max rules already ([ErrTooManyRules]).
	AddRule(ctx context.Context, r Rule, max int) error
	// Rules returns the owner's rules, oldest first.
	Rules(ctx context.Context, owner tool.Identity) ([]Rule, error)
	// DeleteRule removes one of the owner's rules; a missing one, or
	// another owner's, is [ErrRuleNotFound].
	DeleteRule(ctx context.Context, owner tool.Identity, id string) error
	// SweepClosed removes up to limit conversations closed and unchanged
	// since before, with their transcripts, turn logs, provider records
	// and the rules scoped to them (a rule that holds everywhere stays),
	// and returns the ones it removed. Their usage records stay.
	SweepClosed(ctx context.Context, before time.Time, limit int) ([]Swept, error)
	// Ping reports whether the store can be reached.
	Ping(ctx context.Context) error
	// Close releases the store. Safe to call twice.
	Close() error
}

var (
	// ErrNotFound: no such conversation for this owner.
	ErrNotFound = errors.New("host: no such conversation")
	// ErrConflict: the conversation changed since it was read (another
	// replica, or a concurrent request); read it again.
	ErrConflict = errors.New("host: the conversation changed since it was read; retry the request")
	// ErrExists: Create was given an id that is taken.
	ErrExists = errors.New("host: a conversation with this id exists")
	// ErrFenced: a replica holding the conversation under a newer lease
	// epoch has written it; a write under an older one is refused, so a
	// replica that lost the conversation changes nothing of it.
	ErrFenced = errors.New("host: another replica holds this conversation under a newer lease; this replica's write was refused")
	// ErrForwardVoided: the forwarded request a turn would begin for was
	// given up by the replica that forwarded it (its caller was told to
	// send it again), so it must not run.
	ErrForwardVoided = errors.New("host: the replica that forwarded this request gave up waiting for it; it was not run")
	// ErrNoRecord: no provider record is stored under the binding.
	ErrNoRecord = errors.New("host: no record is stored under that binding")
)

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

// Pending is the request a paused conversation waits on.
type Pending struct {
	// Question is what the person is asked; Tool names the tool an
	// approval is about, if any.
	Question string `json:"question"`
	Tool     string `json:"tool"`
	// Kind is "approval" or "elicitation".
	Kind string `json:"kind,omitempty"`
	// RequestID and TurnID name the provider's request and the turn that
	// raised it, so a decision reaches it after a restart.
	RequestID string `json:"requestId,omitempty"`
	TurnID    string `json:"turnId,omitempty"`
	// Args is what the approval is about as the provider knows it (the
	// tool call's input; a file edit's {"path","oldText","newText"}), a
	// JSON object of at most MaxPendingArgs bytes, for the person to read;
	// nil when the provider did not say or it was larger (ArgsCut).
	Args    json.RawMessage `json:"args,omitempty"`
	ArgsCut int             `json:"argsCut,omitempty"` // the size of arguments too large to keep
}

// MaxPendingArgs bounds Pending.Args.
const MaxPendingArgs = 64 << 10

// Message is one entry of a conversation's transcript as the host keeps
// it: what the person said, what the agent did (its activity outputs, in
// a word or two each: "calling run_code") and what it answered. The
// agent's own record of the conversation is the provider's to keep.
type Message struct {
	Role    string `json:"role"` // "user", "activity" or "assistant"
	Content string `json:"content,omitempty"`
	// RunID is the turn the message belongs to.
	RunID string `json:"runId,omitempty"`
	// Call is the tool call an activity is about, when the provider said
	// (its input as the call starts, its output as it ends), bounded by
	// MaxCallBytes.
	Call *CallView `json:"call,omitempty"`
}

// CallView is a tool call as the transcript keeps it.
type CallView struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// Input is the call's arguments (a JSON value); InputCut, when set, is
	// the size of arguments too large to keep.
	Input    json.RawMessage `json:"input,omitempty"`
	InputCut int             `json:"inputCut,omitempty"`
	// Output is what the call returned (set on its end), cut past
	// MaxCallBytes with OutputCut its whole size.
	Output    *string `json:"output,omitempty"`
	OutputCut int     `json:"outputCut,omitempty"`
	IsError   bool    `json:"isError,omitempty"`
}

// Conversation is a hosted conversation as the store keeps it.
type Conversation struct {
	ID    string
	Owner tool.Identity
	State State
	// Turns counts the messages that ran (answered, paused or failed).
	Turns int
	// Provider is the key of the provider that holds the conversation;
	// Binding is its native identity there, empty until the first turn
	// opened a session.
	Provider string
	Binding  provider.Binding
	// Agent is the name of the agent profile the conversation was opened
	// with (Options.Agents); "" for one opened before profiles, served
	// by the default agent. Model is the model its person chose among
	// the agent's, "" for the agent's default. Both are fixed at Create.
	Agent, Model string
	// Messages counts the transcript's messages in the store.
	Messages int
	// Transcript is the conversation so far (Load fills it; nil from
	// Info and List).
	Transcript []Message
	// Pending is set exactly when State is StatePaused.
	Pending *Pending
	// LastRunID is the run of the last turn.
	LastRunID string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Version counts saves; Save checks it (optimistic concurrency).
	Version int64
	// Epoch is the newest lease epoch that wrote the conversation (0
	// without leases); Save and BeginTurn refuse an older one.
	Epoch int64
	// Begun is the turn that began (BeginTurn) and whose end no Save has
	// recorded yet; nil when there is none. Save clears it.
	Begun *Begun
}

// Begun is a turn in flight as the store knows it: enough for whoever
// learns it was lost to record it.
type Begun struct {
	RunID string `json:"runId"`
	// Kind is "message" or "decision".
	Kind string `json:"kind"`
	// Input is the person's message (kind "message").
	Input string `json:"input,omitempty"`
	// Forward is the id the forwarding replica gave the request, when it
	// was forwarded (see Store.VoidForward).
	Forward string    `json:"forward,omitempty"`
	Started time.Time `json:"started"`
}

// Update is what one Save writes.
type Update struct {
	// Conversation is the new state; its Version is the one that was read
	// and its Messages the count already stored.
	Conversation Conversation
	// Append is what the transcript gained.
	Append []Message
	// Turn, when set, is appended to the turn log.
	Turn *Turn
	// Epoch is the writer's lease epoch (0 without leases). The store
	// refuses the save with [ErrFenced] when a newer one has written the
	// conversation, and otherwise keeps it as the conversation's Epoch.
	Epoch int64
	// Records are providers' records of the conversation that go in the
	// same transaction (see [SaveRecord]), after the conversation's own
	// write and only when it succeeds.
	Records []RecordWrite
}

// Turn outcomes in the turn log.
const (
	TurnAnswered  = "answered"
	TurnPaused    = "paused"
	TurnFailed    = "failed"
	TurnCut       = "cut"       // cut by the shutdown drain bound
	TurnAbandoned = "abandoned" // a pause given up (evicted or closed)
	TurnClosed    = "closed"    // the conversation was closed
	// TurnInterrupted: the provider ended the turn before its answer (the
	// turn's client went away with nobody left to answer, or the agent
	// stopped itself).
	TurnInterrupted = "interrupted"
	// TurnCancelled: a cancel (POST …/cancel, or a close of the busy
	// conversation) stopped the turn before it answered, or gave up the
	// request it waited on. TurnTimedOut: it ran past the turn timeout.
	TurnCancelled = "cancelled"
	TurnTimedOut  = "timed_out"
	// TurnCleanupFailed: closing the provider session failed; the host
	// retries it (Error says what failed). TurnCleanedUp records the retry
	// that succeeded.
	TurnCleanupFailed = "cleanup_failed"
	TurnCleanedUp     = "cleaned_up"
	// TurnLost: the turn was cut because the replica running it could no
	// longer be sure it held the conversation (its lease deadline passed,
	// or another replica took the conversation over): what it had run so
	// far may have taken effect. Whichever replica learns it first
	// records it.
	TurnLost = "lost"
	// TurnCompleted: the replica that began the turn stopped before it
	// recorded the end, and the agent's own record shows the turn ended
	// (a durable agent finished it elsewhere); its answer is in the
	// agent's record, which the next turn continues from, not in this
	// transcript.
	TurnCompleted = "completed"
	// TurnApproved: a standing rule answered a request of the turn
	// (kind "rule"; Turn.Rule names it).
	TurnApproved = "approved"
)

// Turn is one entry of a conversation's turn log: facts, not content.
type Turn struct {
	// Seq numbers the entries of one conversation from 1; the store sets it.
	Seq   int64  `json:"seq"`
	RunID string `json:"runId,omitempty"`
	// Kind is "message", "decision", "rule" (a request a standing rule
	// answered: Outcome "approved", Rule naming it), "close", "evict" or
	// "cleanup".
	Kind    string    `json:"kind"`
	Outcome string    `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Rule is the standing rule that answered a request (kind "rule").
	Rule string `json:"rule,omitempty"`
	// Usage is what a message or decision turn used: the store keeps it
	// beside the entry, in the same transaction (and sets its Seq).
	Usage *UsageRecord `json:"-"`
}

// ListOptions narrow List.
type ListOptions struct {
	// OpenOnly leaves out closed conversations.
	OpenOnly bool
	// Limit bounds the answer (default and maximum 1000).
	Limit int
	// After, when set, starts the listing after this conversation (the
	// last of the page before).
	After *ListCursor
}

// MaxList is the most conversations List returns.
const MaxList = 1000

// CheckConversation reports what makes c unfit to store: a store calls it
// before writing.
func CheckConversation(c Conversation) error {
	switch {
	case c.ID == "":
		return errors.New("host: the conversation has no id")
	case c.Owner.Tenant == "" || c.Owner.Principal == "":
		return errors.New("host: the conversation has no owner; a conversation belongs to a tenant and a principal")
	case c.Owner.ConversationID != "":
		return errors.New("host: an owner names a tenant and a principal, not a conversation")
	case c.State != StateOpen && c.State != StatePaused && c.State != StateClosed:
		return errors.New("host: unknown conversation state " + string(c.State))
	case (c.State == StatePaused) != (c.Pending != nil):
		return errors.New("host: a conversation has a pending question exactly when it is paused")
	case c.Messages < 0:
		return errors.New("host: a conversation's message count is negative")
	}
	return nil
}

// Swept is a conversation Store.SweepClosed removed: its owner and id.
type Swept struct {
	Owner tool.Identity
	ID    string
}
