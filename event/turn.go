package event

// The turn's vocabulary: the events the loop (package agent, and every
// executor it runs on) emits for a turn, its model calls, its check-ins and
// a fatal error. They are the one family defined here rather than beside
// their emitter, because a room that must not import the loop reads them:
// the host draws a conversation's runs from them (the host never imports
// agent). A tool call's and a tool session's events are package tool's, a
// code run's package code's, the host's, a provider's, the jail's theirs.
const (
	// agent: a turn of the loop.
	TypeTurnStart Type = "agentry.agent.turn_start"
	TypeTurnEnd   Type = "agentry.agent.turn_end"

	// llm: calls to the model.
	TypeLLMStart   Type = "agentry.llm.start"
	TypeLLMEnd     Type = "agentry.llm.end"
	TypeLLMDelta   Type = "agentry.llm.delta"   // content: streamed text, full tier only
	TypeLLMMessage Type = "agentry.llm.message" // content: a whole message, full tier only

	// pause: check-ins.
	TypePauseRequest Type = "agentry.pause.request"
	TypePauseResume  Type = "agentry.pause.resume"

	// error: a run that ended in an error.
	TypeFatal Type = "agentry.error.fatal"
)

func init() {
	Register(TypeTurnStart, func() any { return new(TurnStart) })
	Register(TypeTurnEnd, func() any { return new(TurnEnd) })
	Register(TypeLLMStart, func() any { return new(LLMStart) })
	Register(TypeLLMEnd, func() any { return new(LLMEnd) })
	RegisterContent(TypeLLMDelta, func() any { return new(LLMDelta) })
	RegisterContent(TypeLLMMessage, func() any { return new(LLMMessage) })
	Register(TypePauseRequest, func() any { return new(PauseRequest) })
	Register(TypePauseResume, func() any { return new(PauseResume) })
	Register(TypeFatal, func() any { return new(Fatal) })
}

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

// Fatal reports a run that ended in an error. ErrorClass is one of package
// tool's Class constants.
type Fatal struct {
	Where      string `json:"where"`
	Error      string `json:"error"`
	ErrorClass string `json:"errorClass,omitempty"`
}
