package provider

import "github.com/agentry-dev/agentry/event"

// The events a validated provider session emits ([Validate]): sessions
// opened and closed, turns, requests raised for the host, cleanup problems,
// and interactions outside a turn. Each has one payload struct below, sent
// as a pointer; init registers them with package event.
const (
	TypeSessionOpened event.Type = "agentry.provider.session_opened"
	TypeSessionClosed event.Type = "agentry.provider.session_closed"
	TypeTurnStart     event.Type = "agentry.provider.turn_start"
	TypeTurnEnd       event.Type = "agentry.provider.turn_end"
	TypeRequest       event.Type = "agentry.provider.request"
	TypeCleanupFailed event.Type = "agentry.provider.cleanup_failed"
	TypeQuarantined   event.Type = "agentry.provider.quarantined"
	// TypeInteraction and TypeInteractionEnd bracket a session
	// interaction (a question or notice outside a turn). They never carry
	// its text: only its size and shape.
	TypeInteraction    event.Type = "agentry.provider.interaction"
	TypeInteractionEnd event.Type = "agentry.provider.interaction_end"
)

func init() {
	event.Register(TypeSessionOpened, func() any { return new(SessionEvent) })
	event.Register(TypeSessionClosed, func() any { return new(SessionEvent) })
	event.Register(TypeTurnStart, func() any { return new(TurnEvent) })
	event.Register(TypeTurnEnd, func() any { return new(TurnEvent) })
	event.Register(TypeRequest, func() any { return new(RequestEvent) })
	event.Register(TypeCleanupFailed, func() any { return new(Problem) })
	event.Register(TypeQuarantined, func() any { return new(Problem) })
	event.Register(TypeInteraction, func() any { return new(InteractionEvent) })
	event.Register(TypeInteractionEnd, func() any { return new(InteractionEvent) })
}

// SessionEvent is the payload of session_opened and session_closed.
type SessionEvent struct {
	Provider string `json:"provider"`
	Instance string `json:"instance,omitempty"`
	// Mode is create, resume or branch when opened.
	Mode string `json:"mode,omitempty"`
	// Reason says why it closed.
	Reason string `json:"reason,omitempty"`
}

// TurnEvent is the payload of turn_start and turn_end.
type TurnEvent struct {
	Provider   string  `json:"provider"`
	TurnID     string  `json:"turnId"`
	Outcome    string  `json:"outcome,omitempty"`
	DurationMs float64 `json:"durationMs,omitempty"`
}

// RequestEvent reports a request (approval, elicitation) a provider raised
// for the host.
type RequestEvent struct {
	Provider  string `json:"provider"`
	TurnID    string `json:"turnId"`
	RequestID string `json:"requestId"`
	Kind      string `json:"kind"`
}

// Problem is the payload of cleanup_failed and quarantined.
type Problem struct {
	Provider string `json:"provider"`
	Code     string `json:"code"`
	Error    string `json:"error"`
}

// InteractionEvent is the payload of interaction and interaction_end:
// what a provider asked or told the host outside a turn, described, never
// quoted.
type InteractionEvent struct {
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
