// Package event is agentry's typed event stream: one envelope ([Event]) for
// every sink, a port every exporter implements ([Sink]), and a fan-out
// ([Bus]) with per-sink filters.
//
// The split follows log/slog: Event is plain data like slog.Record, Sink is
// the small port like slog.Handler, and Bus is the concrete front that
// numbers events, filters them per sink, and keeps a broken sink from
// breaking a run.
//
// It defines no event type itself: each package defines the events it
// emits beside the code that emits them (agent the turn's, tool a tool
// call's and its sessions', host the host's …) and registers their
// payloads ([Register]), so the ground floor does not change with every
// feature. A reader that must not import the emitting package reads the
// payload by its JSON names ([Event.PayloadAs]).
//
// Events carry facts, not user data. Isolation keys appear only as their
// digest (keyHash); identity appears in Meta only when the caller gave one.
package event

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Type names an event: agentry.<domain>.<name>.
type Type string

// Domain returns the middle part of the type name ("tools" for
// "agentry.tools.session_closed"), or "" when the name is not agentry's.
func (t Type) Domain() string {
	s, ok := strings.CutPrefix(string(t), "agentry.")
	if !ok {
		return ""
	}
	d, _, _ := strings.Cut(s, ".")
	return d
}

// Meta is the envelope's context. Strings are empty when absent: a run id,
// session id or identity is never invented.
type Meta struct {
	RunID     string    `json:"runId,omitempty"`
	SessionID string    `json:"sessionId,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	Principal string    `json:"principal,omitempty"`
	AgentID   string    `json:"agentId,omitempty"`
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
}

// Event is one thing that happened. Its JSON form is
// {"type": ..., "payload": {...}, "meta": {...}}.
type Event struct {
	Type    Type `json:"type"`
	Payload any  `json:"payload"`
	Meta    Meta `json:"meta"`
}

// Sink receives events. Implementations must be safe for concurrent use.
type Sink interface {
	// Export accepts one event. It never blocks on I/O and never panics; a
	// sink that needs I/O buffers and writes elsewhere.
	Export(Event)
	// Flush writes what was accepted, bounded by ctx.
	Flush(ctx context.Context) error
	// Close stops accepting, flushes and releases. Safe to call twice.
	Close(ctx context.Context) error
}

// Decode parses one event from its JSON form. A payload of a type registered
// with [Register] decodes into its payload struct (a pointer, as emitters
// send it); any other payload stays a json.RawMessage.
func Decode(data []byte) (Event, error) {
	var raw struct {
		Type    Type            `json:"type"`
		Payload json.RawMessage `json:"payload"`
		Meta    Meta            `json:"meta"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Event{}, fmt.Errorf("event: not an event: %w", err)
	}
	if raw.Type == "" {
		return Event{}, fmt.Errorf("event: the line has no \"type\"")
	}
	e := Event{Type: raw.Type, Meta: raw.Meta, Payload: raw.Payload}
	k, ok := lookup(raw.Type)
	if !ok || len(raw.Payload) == 0 || string(raw.Payload) == "null" {
		return e, nil
	}
	p := k.newPayload()
	if err := json.Unmarshal(raw.Payload, p); err != nil {
		return Event{}, fmt.Errorf("event: %s payload: %w", raw.Type, err)
	}
	e.Payload = p
	return e, nil
}
