package event

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Every event type is defined by the package that emits it, beside the code
// that emits it (the loop's in agent, a tool call's in tool, the host's in
// host, the jail's in jail …), and registered here from that package's init
// function. This package keeps only the envelope, the bus and the sink port:
// it changes when the envelope does, not with every feature.

// kind is what the bus needs to know about a registered type.
type kind struct {
	newPayload func() any
	// content: the payload carries text a model or a person wrote; only
	// full-tier sinks receive it.
	content bool
}

var (
	registerMu sync.Mutex // serialises writers; readers load the map
	registry   atomic.Pointer[map[Type]kind]
	// contentTypes lists the types registered as content (a handful): the
	// bus asks for every event and sink whether a type is content, and a
	// scan of a short slice costs less than a map lookup (hashing the type).
	contentTypes atomic.Pointer[[]Type]
)

// Register tells [Decode] and [NewPayload] the payload of an event type a
// package defines and emits: newPayload returns a new zero payload, a
// pointer, as the emitter sends it. Call it from the defining package's init
// function, so that every program that can emit the type can also read it
// back. It panics on an empty type, a nil newPayload, or a type already
// registered, as database/sql.Register does.
func Register(t Type, newPayload func() any) { register(t, kind{newPayload: newPayload}) }

// RegisterContent is [Register] for a type whose payload carries content
// (streamed text, a whole message): the bus hands it only to sinks of the
// full tier ([TierFull]).
func RegisterContent(t Type, newPayload func() any) {
	register(t, kind{newPayload: newPayload, content: true})
}

func register(t Type, k kind) {
	if t == "" || k.newPayload == nil {
		panic("event: Register needs a type and a payload constructor")
	}
	registerMu.Lock()
	defer registerMu.Unlock()
	next := map[Type]kind{}
	if cur := registry.Load(); cur != nil {
		if _, dup := (*cur)[t]; dup {
			panic("event: Register called twice for " + string(t))
		}
		for k, v := range *cur {
			next[k] = v
		}
	}
	next[t] = k
	registry.Store(&next)
	if k.content {
		var content []Type
		if cur := contentTypes.Load(); cur != nil {
			content = slices.Clone(*cur)
		}
		content = append(content, t)
		contentTypes.Store(&content)
	}
}

// lookup is what was registered for t.
func lookup(t Type) (kind, bool) {
	cur := registry.Load()
	if cur == nil {
		return kind{}, false
	}
	k, ok := (*cur)[t]
	return k, ok
}

// Types lists every registered type, sorted: the types of the packages
// this program links.
func Types() []Type {
	cur := registry.Load()
	if cur == nil {
		return nil
	}
	out := make([]Type, 0, len(*cur))
	for t := range *cur {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// NewPayload returns a new zero payload (a pointer) for t, or nil when no
// package this program links registered t.
func NewPayload(t Type) any {
	if k, ok := lookup(t); ok {
		return k.newPayload()
	}
	return nil
}

// isContent reports whether t was registered as content.
func isContent(t Type) bool {
	cur := contentTypes.Load()
	return cur != nil && slices.Contains(*cur, t)
}

// PayloadAs reads e's payload into v, a pointer to a struct, by the
// payload's JSON field names, whatever form the payload has: the struct an
// emitter sent, or the json.RawMessage [Decode] leaves for a type this
// program did not register. It is how a reader that must not import the
// package defining an event (an exporter, the audit, the host reading an
// agent's turn) reads it: the JSON names on the wire are the contract,
// and the reader's struct names only the fields it reads. A nil payload
// leaves v as it is.
func (e Event) PayloadAs(v any) error {
	var data []byte
	switch p := e.Payload.(type) {
	case nil:
		return nil
	case json.RawMessage:
		data = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("event: %s payload: %w", e.Type, err)
		}
		data = b
	}
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("event: %s payload: %w", e.Type, err)
	}
	return nil
}

// Ms converts a duration to fractional milliseconds, the unit of every
// *Ms payload field.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
