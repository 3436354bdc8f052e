package event

import "time"

// The events agentry emits. Each has one payload struct below; emitters
// send a pointer to it.
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
	// ErrorClass says why IsError: "invalid_arguments", "tool_error",
	// "panic", "unknown_tool", "declined".
	ErrorClass string `json:"errorClass,omitempty"`
}

// ToolSession is the payload of session_started and session_reused.
type ToolSession struct {
	Tool     string `json:"tool"`
	Scope    string `json:"scope"`
	KeyHash  string `json:"keyHash"`
	RunnerID string `json:"runnerId,omitempty"`
	Label    string `json:"label,omitempty"`
	Calls    int    `json:"calls"`
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
	// StateLost is true when a broken persistent session was replaced by a
	// fresh one for this run.
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
}

// Types lists every type this package defines, in a stable order.
func Types() []Type {
	return []Type{
		TypeTurnStart, TypeTurnEnd,
		TypeLLMStart, TypeLLMEnd, TypeLLMDelta, TypeLLMMessage,
		TypeToolStart, TypeToolEnd,
		TypeSessionStarted, TypeSessionReused, TypeSessionClosed, TypeSessionCloseFailed, TypeCodeRun,
		TypePauseRequest, TypePauseResume,
		TypeFatal, TypeToolPanic,
		TypeProviderSessionOpened, TypeProviderSessionClosed, TypeProviderTurnStart, TypeProviderTurnEnd,
		TypeProviderRequest, TypeProviderCleanupFailed, TypeProviderQuarantined,
		TypeProviderInteraction, TypeProviderInteractionEnd,
		TypeHostSessionOpened, TypeHostSessionClosed, TypeHostSessionEvicted, TypeHostAdmissionRefused, TypeHostTurnFailed,
	}
}

// NewPayload returns a new zero payload (a pointer) for t, or nil when t
// is not one of this package's types.
func NewPayload(t Type) any {
	if f, ok := payloads[t]; ok {
		return f()
	}
	return nil
}

// Ms converts a duration to fractional milliseconds, the unit of every
// *Ms payload field.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
