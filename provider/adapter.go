package provider

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/agentry-dev/agentry/llm"
)

// Adapter is what a provider implements: it opens sessions. Resume,
// branch and authentication are optional ports ([Resumer], [Brancher],
// [Authenticator]) an adapter implements exactly when its capabilities
// declare them.
//
// Adapters are written against a host that behaves; they receive only
// requests the wrapper has checked. Hosts use the wrapper ([Validate]),
// never an adapter directly.
type Adapter interface {
	// Create opens a new session. Before returning it must report the
	// session's native identity exactly once through req.OnBinding.
	Create(ctx context.Context, req CreateRequest) (Session, error)
}

// Resumer is the optional port that reopens a session from its binding.
type Resumer interface {
	// Resume reopens the conversation req.Binding names; the session it
	// returns must have that binding.
	Resume(ctx context.Context, req ResumeRequest) (Session, error)
}

// Brancher is the optional port that forks a session after one of its
// turns.
type Brancher interface {
	// Branch opens a new session continuing req.Source as it stood after
	// req.Source.TurnID. It reports the branch's own, new identity exactly
	// once through req.OnBinding before returning.
	Branch(ctx context.Context, req BranchRequest) (Session, error)
}

// Authenticator is the optional port that runs an authentication flow.
type Authenticator interface {
	Authenticate(ctx context.Context, req AuthRequest) (AuthResult, error)
}

// Session is one provider session. The wrapper serialises what the
// contract needs serialised: at most one turn runs at a time, and Close is
// called once per attempt. Interrupt and Steer (optional ports) and Close
// may be called while a turn's outputs are being pulled.
type Session interface {
	// Binding is the provider's native identity of this conversation.
	Binding() Binding
	// RunTurn runs one turn. Outputs are produced as the host pulls them:
	// turn.started first, then any text, activity, and either
	// turn.completed or exactly one request, after which the sequence
	// ends. A provider must stop when yield returns false.
	RunTurn(ctx context.Context, req TurnRequest) iter.Seq2[Output, error]
	// Resolve answers the turn's open request and continues the turn: the
	// outputs follow on from the request (no second turn.started) and end
	// the same way.
	Resolve(ctx context.Context, res Resolution) iter.Seq2[Output, error]
	// Close ends the session and frees what it holds.
	Close(ctx context.Context, reason CloseReason) error
}

// Interrupter is the optional session port that ends a running or waiting
// turn. Interrupting a running turn makes its outputs end at
// turn.completed; interrupting a waiting turn ends it with no more
// outputs. An interrupt for a turn that has already ended is a no-op.
type Interrupter interface {
	Interrupt(ctx context.Context, turnID string) error
}

// Pender is the optional session port of a provider that declares
// Sessions.ResumePending. The wrapper asks a session it resumed whether
// the conversation's last turn was waiting on a request when its previous
// session went (closed with a reason that keeps it, or lost with its
// process); if so, the session starts out waiting on that request, which
// the host answers with Resolve (or ends with Interrupt) as if the turn
// had never left. It is consulted once, when a resume is adopted.
type Pender interface {
	// Pending returns the waiting turn's id and its request, or ok false.
	Pending() (turnID string, req Request, ok bool)
}

// Steerer is the optional session port that adds input to a running turn.
type Steerer interface {
	Steer(ctx context.Context, req SteerRequest) error
}

// Workspacer is the optional session port of a provider whose session
// works on files in a directory of this machine: an external agent's
// workspace, the native agent's interpreter's /work. The host moves a
// person's files in and out of it. Like database/sql's optional driver
// interfaces it is found by type assertion and declares no capability.
type Workspacer interface {
	// Workspace returns the absolute directory holding the session's
	// files, making what it needs first (an interpreter not yet started).
	// What the host writes there is confined to it (an os.Root).
	Workspace(ctx context.Context) (string, error)
}

// HostToolsExpecter is the optional adapter port of a provider that
// prepares sessions ahead of need (an external agent's warm pool): a host
// that lends the same tools to every session it opens tells it their
// definitions, so a session prepared ahead already lists them; which
// conversation's binding answers a call is still decided at each opening,
// by its HostBinding. Like [Workspacer] it is found by type assertion and
// declares no capability. Hosts call it through
// [Validated.ExpectHostTools], which checks the definitions first.
type HostToolsExpecter interface {
	// ExpectHostTools replaces the definitions expected (empty: none).
	// It must not block on preparing sessions.
	ExpectHostTools(tools []HostToolSpec)
}

// Binding is a provider's native identity of a conversation (its session
// id, thread id, conversation id): an opaque id a host stores to resume.
type Binding string

// CreateRequest opens a session.
type CreateRequest struct {
	// SessionID is the host's id for the session (an opaque id).
	SessionID string
	// WorkingDirectory is absolute and clean. The host chooses it; it is
	// not an authorisation.
	WorkingDirectory string
	// Configuration is opaque to the contract: empty or a JSON object.
	Configuration json.RawMessage
	// HostBinding is set by the host to lend tools to the session; the
	// wrapper claims it and never passes it on.
	HostBinding *HostBinding
	// HostTools is what a provider sees of the host binding: set by the
	// wrapper, nil when the host lent nothing. A host leaves it nil.
	HostTools HostTools
	// OnBinding receives the session's native identity. A host may set it
	// to learn the binding as soon as the provider knows it; the provider
	// must call the one it is given exactly once before Create returns.
	OnBinding func(Binding)
	// Interactions is the host's way to hear the session's questions and
	// notices. A provider that declares interactions receives the
	// wrapper's facade in its place, for the opening and the session's
	// life; one that declares none receives nil.
	Interactions Interactions
}

// ResumeRequest reopens a session from its binding.
type ResumeRequest struct {
	SessionID        string
	WorkingDirectory string
	Configuration    json.RawMessage
	Binding          Binding
	HostBinding      *HostBinding
	HostTools        HostTools
	Interactions     Interactions
}

// BranchSource names the session and turn a branch continues from.
type BranchSource struct {
	Binding Binding
	TurnID  string
}

// BranchRequest forks a session after one of its turns.
type BranchRequest struct {
	SessionID        string
	WorkingDirectory string
	Configuration    json.RawMessage
	Source           BranchSource
	HostBinding      *HostBinding
	HostTools        HostTools
	OnBinding        func(Binding)
	Interactions     Interactions
}

// TurnRequest starts a turn.
type TurnRequest struct {
	// TurnID is the host's id for the turn, unique within the session.
	TurnID string
	// Input is what the agent is asked: the person's words, as they are.
	Input string
	// Context, when set, is a note from the host the agent is given
	// before Input, as context of its own and never inside the person's
	// words (a host that took the conversation over from a replica that
	// stopped answering says what was lost). Input and Context together
	// are bounded by Limits.MaxInputBytes.
	Context string
	// Limit, when set, is the host's budget for the turn: a provider that
	// runs agentry's turn loop (native, durable) asks it before each model
	// call after the first, with what the turn used so far, and a turn
	// whose answer is not empty (the cap it crossed) finishes its step,
	// then ends with one model call with tool calls withheld. A provider
	// whose agent runs its own loop (ACP) does not ask it.
	Limit func(used llm.TurnUsage) (crossed string)
}

// SteerRequest adds input to the running turn.
type SteerRequest struct {
	TurnID string
	Input  string
}

// Resolution answers a request.
type Resolution struct {
	TurnID    string
	RequestID string
	// Approve accepts an approval or elicitation; false declines.
	Approve bool
	// Note is an optional word to the agent.
	Note string
	// Response is an accepted elicitation's answer: a JSON object. It must
	// be empty for approvals and declines.
	Response json.RawMessage
	// Limit is TurnRequest.Limit for the rest of the turn.
	Limit func(used llm.TurnUsage) (crossed string)
}

// CloseReason says why a session is closing.
type CloseReason string

const (
	// CloseRequested: the host asked (the default for an empty reason).
	CloseRequested CloseReason = "requested"
	// CloseContractRejected: the wrapper refused a candidate session.
	CloseContractRejected CloseReason = "contract_rejected"
	// CloseShutdown: the host is stopping.
	CloseShutdown CloseReason = "shutdown"
	// CloseEvicted: the host needed the room.
	CloseEvicted CloseReason = "evicted"
)

// OutputKind names what an output says.
type OutputKind string

const (
	OutputTurnStarted   OutputKind = "turn.started"
	OutputText          OutputKind = "text"
	OutputActivity      OutputKind = "activity"
	OutputRequest       OutputKind = "request"
	OutputTurnCompleted OutputKind = "turn.completed"
	// OutputUsage reports what the turn used since the turn's previous
	// usage output (Usage): a provider sends one or more after
	// turn.started and before the turn's last output, or before the error
	// that ends a turn, so a turn that fails still says what it used.
	OutputUsage OutputKind = "usage"
)

// Output is one thing a turn produced.
type Output struct {
	Kind      OutputKind
	SessionID string
	TurnID    string
	// Text is the agent's text (OutputText) or a description of what it is
	// doing (OutputActivity).
	Text string
	// Request is set for OutputRequest.
	Request *Request
	// Outcome is set for OutputTurnCompleted.
	Outcome Outcome
	// Usage is set for OutputUsage: what the turn used since its previous
	// usage output (never a running total).
	Usage *llm.TurnUsage
	// Call is set on an activity about one tool call, as far as the
	// provider knows it: its input when the call starts, its output when
	// it ends. Hosts show it to the person; it is not bounded here.
	Call *CallDetail
}

// CallDetail is one tool call an activity is about.
type CallDetail struct {
	// ID is the call's id, the same on its start and its end.
	ID   string
	Tool string
	// Input is the call's arguments (a file edit's {"path","oldText",
	// "newText"} as the agent sent it), nil when not known.
	Input json.RawMessage
	// Output is what the call returned; Ended is set when it did.
	Output  string
	Ended   bool
	IsError bool
}

// Outcome is how a turn ended.
type Outcome string

const (
	OutcomeCompleted   Outcome = "completed"
	OutcomeInterrupted Outcome = "interrupted"
	OutcomeFailed      Outcome = "failed"
)

// RequestKind names what a request asks of the host.
type RequestKind string

const (
	// RequestApproval asks whether the agent may go on (run a tool,
	// touch a file).
	RequestApproval RequestKind = "approval"
	// RequestElicitation asks the host for structured input.
	RequestElicitation RequestKind = "elicitation"
)

// Request is a question a turn raised for the host.
type Request struct {
	// ID is an opaque id, unique for the life of the session.
	ID   string
	Kind RequestKind
	// Prompt is the question, for a person.
	Prompt string
	// Tool names the tool an approval is about, if any.
	Tool string
	// Schema is an elicitation's JSON Schema for the answer, if any.
	Schema json.RawMessage
	// Args is what an approval is about, for a person to read before
	// answering: the tool call's input as the agent sent it (a JSON
	// object; for a file edit {"path","oldText","newText"}), or nil when
	// the adapter does not know it. Never markup: a host shows it as text.
	Args json.RawMessage
	// Choices, for an approval, are the answers the agent offered, in its
	// order and as it names their kinds (an ACP agent's permission
	// options: ChoiceAllowOnce, "allow_always", "reject_once",
	// "reject_always"); nil when the agent takes a plain yes or no. An
	// approving Resolution is the agent's one-time yes: a host that
	// answers by a standing rule of its own does so only when
	// ChoiceAllowOnce is among them (or Choices is nil), so the agent
	// never remembers a yes the host could not take back.
	Choices []string
}

// ChoiceAllowOnce is the choice of a one-time yes (Request.Choices).
const ChoiceAllowOnce = "allow_once"

// AuthRequest starts an authentication flow.
type AuthRequest struct {
	Flow string
}

// AuthStatus is where an authentication flow stands.
type AuthStatus string

const (
	AuthAuthenticated AuthStatus = "authenticated"
	// AuthPending: the person must act (open URL); call Authenticate again
	// to learn the outcome.
	AuthPending AuthStatus = "pending"
	AuthFailed  AuthStatus = "failed"
)

// AuthResult is the outcome of an authentication step.
type AuthResult struct {
	Status AuthStatus
	// URL is where the person completes a pending flow.
	URL string
}
