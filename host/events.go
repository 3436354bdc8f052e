package host

import "github.com/agentry-dev/agentry/event"

// The events the host emits. Each has one payload struct below, sent as a
// pointer; init registers them with package event. The wire keeps the
// API's word "session" for a conversation.
const (
	// A conversation opened, closed, or evicted to make room.
	TypeConversationOpened  event.Type = "agentry.host.session_opened"
	TypeConversationClosed  event.Type = "agentry.host.session_closed"
	TypeConversationEvicted event.Type = "agentry.host.session_evicted"
	// TypeAdmissionRefused: a request the host turned away (429).
	TypeAdmissionRefused event.Type = "agentry.host.admission_refused"
	// TypeTurnFailed: a turn the host could not finish.
	TypeTurnFailed event.Type = "agentry.host.turn_failed"
	// A provider session's close failed (the host retries it), and a
	// retry that finished the cleanup.
	TypeCleanupFailed event.Type = "agentry.host.cleanup_failed"
	TypeCleanupDone   event.Type = "agentry.host.cleanup_done"
)

func init() {
	event.Register(TypeConversationOpened, func() any { return new(ConversationEvent) })
	event.Register(TypeConversationClosed, func() any { return new(ConversationEvent) })
	event.Register(TypeConversationEvicted, func() any { return new(ConversationEvent) })
	event.Register(TypeAdmissionRefused, func() any { return new(AdmissionRefused) })
	event.Register(TypeTurnFailed, func() any { return new(TurnFailedEvent) })
	event.Register(TypeCleanupFailed, func() any { return new(CleanupEvent) })
	event.Register(TypeCleanupDone, func() any { return new(CleanupEvent) })
}

// ConversationEvent is the payload of session_opened, session_closed and
// session_evicted.
type ConversationEvent struct {
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

// TurnFailedEvent reports a turn the host could not finish (cut by a drain
// bound, or failed).
type TurnFailedEvent struct {
	Error string `json:"error"`
}

// CleanupEvent is the payload of cleanup_failed and cleanup_done: a
// provider session's close that failed, and each retry of it. It names
// the provider and (in Meta) the conversation; never a key.
type CleanupEvent struct {
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
