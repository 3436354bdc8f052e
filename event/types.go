package event

import (
	"sync"
	"time"
)

// The events this package defines. Each has one payload struct below;
// emitters send a pointer to it. A package that owns a concern defines its
// own event types beside it and registers their payloads ([Register]): the
// jail's and the code runners' live in package jail.
const (
	// agent: a turn of the loop.
	TypeTurnStart Type = "agentry.agent.turn_start"
	TypeTurnEnd   Type = "agentry.agent.turn_end"

	// llm: calls to the model.
	TypeLLMStart   Type = "agentry.llm.start"
	TypeLLMEnd     Type = "agentry.llm.end"
	TypeLLMDelta   Type = "agentry.llm.delta"   // content: streamed text, full tier only
	TypeLLMMessage Type = "agentry.llm.message" // content: a whole message, full tier only

	// tool: tool calls.
	TypeToolStart Type = "agentry.tool.start"
	TypeToolEnd   Type = "agentry.tool.end"

	// tools: sessions held by tools, and code runs.
	TypeSessionStarted     Type = "agentry.tools.session_started"
	TypeSessionReused      Type = "agentry.tools.session_reused"
	TypeSessionClosed      Type = "agentry.tools.session_closed"
	TypeSessionCloseFailed Type = "agentry.tools.session_close_failed"
	TypeCodeRun            Type = "agentry.tools.code_run"
	// TypeSessionCapacity: an opener found every live session busy, and
	// either waited for room or was refused.
	TypeSessionCapacity Type = "agentry.tools.session_capacity"

	// pause: check-ins.
	TypePauseRequest Type = "agentry.pause.request"
	TypePauseResume  Type = "agentry.pause.resume"

	// error: what went wrong beyond one tool result.
	TypeFatal     Type = "agentry.error.fatal"
	TypeToolPanic Type = "agentry.error.tool_panic"

	// provider: hosted agent-provider sessions.
	TypeProviderSessionOpened Type = "agentry.provider.session_opened"
	TypeProviderSessionClosed Type = "agentry.provider.session_closed"
	TypeProviderTurnStart     Type = "agentry.provider.turn_start"
	TypeProviderTurnEnd       Type = "agentry.provider.turn_end"
	TypeProviderRequest       Type = "agentry.provider.request"
	TypeProviderCleanupFailed Type = "agentry.provider.cleanup_failed"
	TypeProviderQuarantined   Type = "agentry.provider.quarantined"
	// TypeProviderInteraction and TypeProviderInteractionEnd bracket a
	// session interaction (a question or notice outside a turn). They
	// never carry its text: only its size and shape.
	TypeProviderInteraction    Type = "agentry.provider.interaction"
	TypeProviderInteractionEnd Type = "agentry.provider.interaction_end"

	// host: the standing host.
	TypeHostSessionOpened    Type = "agentry.host.session_opened"
	TypeHostSessionClosed    Type = "agentry.host.session_closed"
	TypeHostSessionEvicted   Type = "agentry.host.session_evicted"
	TypeHostAdmissionRefused Type = "agentry.host.admission_refused"
	TypeHostTurnFailed       Type = "agentry.host.turn_failed"

	// door: how a command serves others.
	TypeUnjailedServing Type = "agentry.door.unjailed"

	// A provider session's close failed (the host retries it), and a
	// retry that finished the cleanup.
	TypeHostCleanupFailed Type = "agentry.host.cleanup_failed"
	TypeHostCleanupDone   Type = "agentry.host.cleanup_done"

	// acp: external coding agents behind provider/acp — their processes
	// and the client calls they make.
	TypeACPAgentStarted Type = "agentry.acp.agent_started"
	TypeACPAgentStopped Type = "agentry.acp.agent_stopped"
	TypeACPFile         Type = "agentry.acp.file"
	TypeACPTerminal     Type = "agentry.acp.terminal"
	// An elicitation an agent sent (elicitation/create) and how it was
	// answered.
	TypeACPElicitation Type = "agentry.acp.elicitation"
	// An agent the client stopped for what it did to the client: it
	// flooded it with requests, sent a message over the size limit, or
	// left what the client sent it unread.
	TypeACPAgentCutOff Type = "agentry.acp.agent_cut_off"
)

// Turn outcomes, in TurnEnd.Outcome.
const (
	OutcomeAnswer    = "answer"
	OutcomeError     = "error"
	OutcomePaused    = "paused"
	OutcomeCancelled = "cancelled"
)

// TurnStart opens a turn (a Run, or a Resume continuing one).
type TurnStart struct {
	Resumed      bool `json:"resumed,omitempty"`
	MessageChars int  `json:"messageChars"`
	Tools        int  `json:"tools"`
}

// TurnEnd closes a turn.
type TurnEnd struct {
	Outcome    string  `json:"outcome"`
	Iterations int     `json:"iterations"`
	DurationMs float64 `json:"durationMs"`
	Error      string  `json:"error,omitempty"`
}

// LLMStart is sent before each call to the model.
type LLMStart struct {
	Model     string `json:"model,omitempty"`
	Iteration int    `json:"iteration"`
	Messages  int    `json:"messages"`
	Tools     int    `json:"tools"`
}

// LLMEnd is sent after each call to the model.
type LLMEnd struct {
	Model        string  `json:"model,omitempty"`
	Iteration    int     `json:"iteration"`
	DurationMs   float64 `json:"durationMs"`
	InputTokens  int     `json:"inputTokens"`
	OutputTokens int     `json:"outputTokens"`
	StopReason   string  `json:"stopReason,omitempty"`
	ToolCalls    int     `json:"toolCalls"`
	Error        string  `json:"error,omitempty"`
}

// LLMDelta carries streamed text. It is content: only the full tier sees it.
type LLMDelta struct {
	Iteration int    `json:"iteration"`
	Text      string `json:"text"`
}

// LLMMessage carries a whole message. It is content: only the full tier
// sees it.
type LLMMessage struct {
	Iteration int    `json:"iteration"`
	Role      string `json:"role"`
	Content   string `json:"content"`
}

// ToolStart is sent before a tool runs.
type ToolStart struct {
	Tool       string `json:"tool"`
	ToolCallID string `json:"toolCallId"`
	Iteration  int    `json:"iteration"`
}

// ToolEnd is sent after a tool returns, fails or panics.
type ToolEnd struct {
	Tool       string  `json:"tool"`
	ToolCallID string  `json:"toolCallId"`
	DurationMs float64 `json:"durationMs"`
	IsError    bool    `json:"isError"`
	// ErrorClass says why IsError: one of the Class constants.
	ErrorClass string `json:"errorClass,omitempty"`
}

// Failure classes: why a tool call's result is an error (ToolEnd.ErrorClass),
// why a run failed (Fatal.ErrorClass), why a tool session failed to close
// (ToolSessionClosed.ErrorClass). Each word is defined here once; the
// doors (tool.Invoke), the loop (agent) and the teardown tier's reports
// use these names.
const (
	// A tool call's result.
	ClassInvalidArguments = "invalid_arguments" // the arguments failed the tool's schema or decoding
	ClassToolError        = "tool_error"        // the tool failed, or answered with an error result
	ClassPanic            = "panic"             // the tool (or a cleanup) panicked and was recovered
	ClassUnknownTool      = "unknown_tool"      // the model named a tool the run does not offer
	ClassDeclined         = "declined"          // a person (or a door that cannot ask one) declined the call
	ClassCapacity         = "capacity"          // every live tool session was busy (also ends the run)
	ClassLost             = "lost"              // a durable tool call whose worker went away; never re-run
	ClassCancelled        = "cancelled"         // the call, the run or the cleanup was cancelled

	// A run's failure (besides capacity and cancelled).
	ClassMaxIterations = "max_iterations" // the run reached its model-call bound
	ClassShutdown      = "shutdown"       // the agent shut down under the run
	ClassModel         = "model"          // the model call failed
	ClassStore         = "store"          // a durable turn could not be saved

	// A cleanup's failure (besides panic and cancelled).
	ClassTimeout = "timeout" // the cleanup outran its deadline
	ClassError   = "error"   // the cleanup returned an error
)

// ToolSession is the payload of session_started and session_reused.
type ToolSession struct {
	Tool     string `json:"tool"`
	Scope    string `json:"scope"`
	KeyHash  string `json:"keyHash"`
	RunnerID string `json:"runnerId,omitempty"`
	Label    string `json:"label,omitempty"`
	Calls    int    `json:"calls"`
}

// Capacity outcomes, in ToolSessionCapacity.Outcome.
const (
	CapacityAdmitted = "admitted" // room appeared while it waited
	CapacityRefused  = "refused"  // none did within the bound
)

// ToolSessionCapacity is the payload of session_capacity: a new session
// found all MaxLive live sessions with a call in flight.
type ToolSessionCapacity struct {
	Tool     string  `json:"tool"`
	Scope    string  `json:"scope"`
	KeyHash  string  `json:"keyHash"`
	MaxLive  int     `json:"maxLive"`
	WaitedMs float64 `json:"waitedMs"`
	Outcome  string  `json:"outcome"`
}

// ToolSessionClosed is the payload of session_closed and
// session_close_failed.
type ToolSessionClosed struct {
	Tool       string  `json:"tool"`
	Scope      string  `json:"scope"`
	KeyHash    string  `json:"keyHash"`
	RunnerID   string  `json:"runnerId,omitempty"`
	Label      string  `json:"label,omitempty"`
	Reason     string  `json:"reason"`
	HeldMs     float64 `json:"heldMs"`
	TookMs     float64 `json:"tookMs"`
	Error      string  `json:"error,omitempty"`
	ErrorClass string  `json:"errorClass,omitempty"`
}

// CodeRun describes one execution of model-written code: facts only, never
// the code or its output.
type CodeRun struct {
	Tool         string  `json:"tool"`
	RunnerID     string  `json:"runnerId"`
	Language     string  `json:"language"`
	OK           bool    `json:"ok"`
	ExitCode     *int    `json:"exitCode,omitempty"`
	OutputChars  int     `json:"outputChars"`
	Truncated    bool    `json:"truncated"`
	StagedInputs int     `json:"stagedInputs"`
	ShapeHash    string  `json:"shapeHash"`
	DurationMs   float64 `json:"durationMs"`
	// StateLost is true when the session was lost before or while running
	// this code (it broke or was closed): the model was told the code may
	// or may not have run, and it was not run again.
	StateLost bool   `json:"stateLost,omitempty"`
	Error     string `json:"error,omitempty"`
}

// PauseRequest is sent when a run pauses for a person.
type PauseRequest struct {
	Tool       string `json:"tool"`
	ToolCallID string `json:"toolCallId"`
}

// PauseResume is sent when a paused run is resumed.
type PauseResume struct {
	Tool       string `json:"tool"`
	ToolCallID string `json:"toolCallId"`
	Approved   bool   `json:"approved"`
}

// Fatal reports a run that ended in an error.
type Fatal struct {
	Where      string `json:"where"`
	Error      string `json:"error"`
	ErrorClass string `json:"errorClass,omitempty"`
}

// ToolPanic reports a tool that panicked; the panic became an error result.
type ToolPanic struct {
	Tool       string `json:"tool"`
	ToolCallID string `json:"toolCallId"`
	Panic      string `json:"panic"`
}

// ProviderSession is the payload of provider session_opened and
// session_closed.
type ProviderSession struct {
	Provider string `json:"provider"`
	Instance string `json:"instance,omitempty"`
	// Mode is create, resume or branch when opened.
	Mode string `json:"mode,omitempty"`
	// Reason says why it closed.
	Reason string `json:"reason,omitempty"`
}

// ProviderTurn is the payload of provider turn_start and turn_end.
type ProviderTurn struct {
	Provider   string  `json:"provider"`
	TurnID     string  `json:"turnId"`
	Outcome    string  `json:"outcome,omitempty"`
	DurationMs float64 `json:"durationMs,omitempty"`
}

// ProviderRequest reports a request (approval, elicitation) a provider
// raised for the host.
type ProviderRequest struct {
	Provider  string `json:"provider"`
	TurnID    string `json:"turnId"`
	RequestID string `json:"requestId"`
	Kind      string `json:"kind"`
}

// ProviderProblem is the payload of cleanup_failed and quarantined.
type ProviderProblem struct {
	Provider string `json:"provider"`
	Code     string `json:"code"`
	Error    string `json:"error"`
}

// HostSession is the payload of host session_opened, session_closed and
// session_evicted.
type HostSession struct {
	// ToolSessionsClosed counts the tool sessions the close fired.
	ToolSessionsClosed int    `json:"toolSessionsClosed,omitempty"`
	Reason             string `json:"reason,omitempty"`
}

// AdmissionRefused reports a request the host turned away (429).
type AdmissionRefused struct {
	Limit      string  `json:"limit"`
	Bound      int     `json:"bound"`
	RetryAfter float64 `json:"retryAfterSeconds"`
}

// HostTurnFailed reports a turn the host could not finish (cut by a drain
// bound, or failed).
type HostTurnFailed struct {
	Error string `json:"error"`
}

// HostCleanup is the payload of host cleanup_failed and cleanup_done: a
// provider session's close that failed, and each retry of it. It names
// the provider and (in Meta) the conversation; never a key.
type HostCleanup struct {
	Provider string `json:"provider"`
	// Closing says what was closing the session: close, evict, shutdown
	// or quarantine.
	Closing string `json:"closing"`
	// Attempt counts the tries so far, the first close included.
	Attempt int    `json:"attempt"`
	Error   string `json:"error,omitempty"`
	// Retrying says the host will try again.
	Retrying bool `json:"retrying,omitempty"`
}

// ACPAgentStarted reports an agent process a launcher started for one
// session.
type ACPAgentStarted struct {
	// Label is the launcher's non-secret name for the process (a hash).
	Label string `json:"label"`
	// Launcher names the launcher ("unjailed", "jail").
	Launcher string `json:"launcher"`
	// Confined is false when nothing but the process's own user stands
	// between the agent and the machine (the unjailed launcher).
	Confined bool    `json:"confined"`
	Pid      int     `json:"pid,omitempty"`
	TookMs   float64 `json:"tookMs"`
}

// ACPAgentStopped reports an agent process that ended.
type ACPAgentStopped struct {
	Label string `json:"label"`
	// Reason is "stopped" (asked to), "exited" (on its own) or "crashed"
	// (on its own, with a failure).
	Reason string `json:"reason"`
	// Forced is true when it had to be killed after the grace period.
	Forced   bool    `json:"forced,omitempty"`
	ExitCode *int    `json:"exitCode,omitempty"`
	Signal   string  `json:"signal,omitempty"`
	HeldMs   float64 `json:"heldMs"`
	Error    string  `json:"error,omitempty"`
	// Stderr, for an agent that ended on its own, is the last lines it
	// wrote to its standard error (joined with " | "), every value of its
	// environment of four bytes or more replaced by <NAME>.
	Stderr string `json:"stderr,omitempty"`
}

// ACPFile reports one fs/read_text_file or fs/write_text_file call an
// agent made. Path is relative to the session's workspace; a refused
// path is not repeated.
type ACPFile struct {
	Op      string `json:"op"` // read, write
	Path    string `json:"path,omitempty"`
	Bytes   int    `json:"bytes"`
	Refused bool   `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ACPTerminal reports one terminal/* call an agent made. Command is the
// program's base name only, never its arguments; Cwd is relative to the
// workspace.
type ACPTerminal struct {
	Op         string `json:"op"` // create, output, wait_for_exit, kill, release
	TerminalID string `json:"terminalId,omitempty"`
	Command    string `json:"command,omitempty"`
	Cwd        string `json:"cwd,omitempty"`
	ExitCode   *int   `json:"exitCode,omitempty"`
	Signal     string `json:"signal,omitempty"`
	Bytes      int    `json:"bytes,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	Refused    bool   `json:"refused,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ACPElicitation reports one elicitation/create an agent sent: its mode
// ("form" or "url"), the session interaction it became (none when it was
// declined before the person was asked), and its outcome ("accepted",
// "declined" or "cancelled"). Reason says why the adapter declined or
// cancelled it by itself; it never quotes the agent's message, the URL or
// the person's answer.
type ACPElicitation struct {
	Mode          string `json:"mode"`
	InteractionID string `json:"interactionId,omitempty"`
	Fields        int    `json:"fields"`
	Options       int    `json:"options,omitempty"`
	Outcome       string `json:"outcome"`
	Reason        string `json:"reason,omitempty"`
}

// ACPAgentCutOff reports an agent the client stopped. Reason is "flood"
// (Refused of its requests were refused within the flood window, past its
// bound of Limit in flight), "oversized_message" or "stalled_input".
type ACPAgentCutOff struct {
	Label   string `json:"label"`
	Reason  string `json:"reason"`
	Refused int    `json:"refused,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Error   string `json:"error"`
}

// UnjailedServing records a door started with --allow-unjailed: several
// principals, or a listener beyond loopback, with model code unjailed.
type UnjailedServing struct {
	Command        string `json:"command"`
	RunnerID       string `json:"runnerId"`
	Principals     int    `json:"principals"`
	Addr           string `json:"addr"`
	BeyondLoopback bool   `json:"beyondLoopback"`
	// Why says why the code is not jailed.
	Why string `json:"why"`
}

// ProviderInteraction is the payload of provider interaction and
// interaction_end: what a provider asked or told the host outside a
// turn, described, never quoted.
type ProviderInteraction struct {
	Provider      string `json:"provider"`
	InteractionID string `json:"interactionId"`
	// Kind is question or notice.
	Kind string `json:"kind"`
	// MessageBytes is the length of the message; Options how many
	// choices a question offered.
	MessageBytes int `json:"messageBytes"`
	Options      int `json:"options,omitempty"`
	// Outcome (interaction_end): answered, declined, acknowledged or
	// failed.
	Outcome    string  `json:"outcome,omitempty"`
	DurationMs float64 `json:"durationMs,omitempty"`
}

var payloads = map[Type]func() any{
	TypeTurnStart:              func() any { return new(TurnStart) },
	TypeTurnEnd:                func() any { return new(TurnEnd) },
	TypeLLMStart:               func() any { return new(LLMStart) },
	TypeLLMEnd:                 func() any { return new(LLMEnd) },
	TypeLLMDelta:               func() any { return new(LLMDelta) },
	TypeLLMMessage:             func() any { return new(LLMMessage) },
	TypeToolStart:              func() any { return new(ToolStart) },
	TypeToolEnd:                func() any { return new(ToolEnd) },
	TypeSessionStarted:         func() any { return new(ToolSession) },
	TypeSessionReused:          func() any { return new(ToolSession) },
	TypeSessionClosed:          func() any { return new(ToolSessionClosed) },
	TypeSessionCloseFailed:     func() any { return new(ToolSessionClosed) },
	TypeCodeRun:                func() any { return new(CodeRun) },
	TypeSessionCapacity:        func() any { return new(ToolSessionCapacity) },
	TypePauseRequest:           func() any { return new(PauseRequest) },
	TypePauseResume:            func() any { return new(PauseResume) },
	TypeFatal:                  func() any { return new(Fatal) },
	TypeToolPanic:              func() any { return new(ToolPanic) },
	TypeProviderSessionOpened:  func() any { return new(ProviderSession) },
	TypeProviderSessionClosed:  func() any { return new(ProviderSession) },
	TypeProviderTurnStart:      func() any { return new(ProviderTurn) },
	TypeProviderTurnEnd:        func() any { return new(ProviderTurn) },
	TypeProviderRequest:        func() any { return new(ProviderRequest) },
	TypeProviderCleanupFailed:  func() any { return new(ProviderProblem) },
	TypeProviderQuarantined:    func() any { return new(ProviderProblem) },
	TypeProviderInteraction:    func() any { return new(ProviderInteraction) },
	TypeProviderInteractionEnd: func() any { return new(ProviderInteraction) },
	TypeHostSessionOpened:      func() any { return new(HostSession) },
	TypeHostSessionClosed:      func() any { return new(HostSession) },
	TypeHostSessionEvicted:     func() any { return new(HostSession) },
	TypeHostAdmissionRefused:   func() any { return new(AdmissionRefused) },
	TypeHostTurnFailed:         func() any { return new(HostTurnFailed) },
	TypeUnjailedServing:        func() any { return new(UnjailedServing) },
	TypeHostCleanupFailed:      func() any { return new(HostCleanup) },
	TypeHostCleanupDone:        func() any { return new(HostCleanup) },
	TypeACPAgentStarted:        func() any { return new(ACPAgentStarted) },
	TypeACPAgentStopped:        func() any { return new(ACPAgentStopped) },
	TypeACPFile:                func() any { return new(ACPFile) },
	TypeACPTerminal:            func() any { return new(ACPTerminal) },
	TypeACPElicitation:         func() any { return new(ACPElicitation) },
	TypeACPAgentCutOff:         func() any { return new(ACPAgentCutOff) },
}

// Types lists every type this package defines, in a stable order.
func Types() []Type {
	return []Type{
		TypeTurnStart, TypeTurnEnd,
		TypeLLMStart, TypeLLMEnd, TypeLLMDelta, TypeLLMMessage,
		TypeToolStart, TypeToolEnd,
		TypeSessionStarted, TypeSessionReused, TypeSessionClosed, TypeSessionCloseFailed, TypeCodeRun, TypeSessionCapacity,
		TypePauseRequest, TypePauseResume,
		TypeFatal, TypeToolPanic,
		TypeProviderSessionOpened, TypeProviderSessionClosed, TypeProviderTurnStart, TypeProviderTurnEnd,
		TypeProviderRequest, TypeProviderCleanupFailed, TypeProviderQuarantined,
		TypeProviderInteraction, TypeProviderInteractionEnd,
		TypeHostSessionOpened, TypeHostSessionClosed, TypeHostSessionEvicted, TypeHostAdmissionRefused, TypeHostTurnFailed,
		TypeUnjailedServing,
		TypeHostCleanupFailed, TypeHostCleanupDone,
		TypeACPAgentStarted, TypeACPAgentStopped, TypeACPFile, TypeACPTerminal, TypeACPElicitation, TypeACPAgentCutOff,
	}
}

// NewPayload returns a new zero payload (a pointer) for t, or nil when t
// is neither one of this package's types nor a registered one.
func NewPayload(t Type) any {
	if f := payloadFor(t); f != nil {
		return f()
	}
	return nil
}

// The payload types other packages define, by event type ([Register]).
var (
	registeredMu sync.RWMutex
	registered   = map[Type]func() any{}
)

// Register tells [Decode] and [NewPayload] the payload of an event type
// another package defines and emits (the jail's, a runner's): newPayload
// returns a new zero payload, a pointer, as the emitter sends it. Call it
// from the defining package's init function, so that every program that
// can emit the type can also read it back. It panics on an empty type, a
// nil newPayload, or a type already known, as database/sql.Register does.
func Register(t Type, newPayload func() any) {
	if t == "" || newPayload == nil {
		panic("event: Register needs a type and a payload constructor")
	}
	registeredMu.Lock()
	defer registeredMu.Unlock()
	if _, dup := payloads[t]; dup {
		panic("event: Register called twice for " + string(t))
	}
	if _, dup := registered[t]; dup {
		panic("event: Register called twice for " + string(t))
	}
	registered[t] = newPayload
}

// payloadFor is the constructor of t's payload, or nil.
func payloadFor(t Type) func() any {
	if f, ok := payloads[t]; ok {
		return f
	}
	registeredMu.RLock()
	defer registeredMu.RUnlock()
	return registered[t]
}

// Ms converts a duration to fractional milliseconds, the unit of every
// *Ms payload field.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
