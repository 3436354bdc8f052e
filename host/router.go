package host

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
)

// Router is the host's event sink: it hands each event of a conversation
// to the request streaming that conversation's turn (SSE), and counts what
// the metrics report. Give Router.Route() to the agent
// (agent.Options.Routes) and the same Router to Options.Router, or let
// New attach one to the engine's bus.
type Router struct {
	mu   sync.RWMutex
	subs map[string]*subscription

	metrics atomic.Pointer[metrics]
	record  atomic.Pointer[record] // what the console shows (console_record.go)
	owned   atomic.Bool
}

// NewRouter returns a router with no subscribers.
func NewRouter() *Router { return &Router{subs: make(map[string]*subscription)} }

// Route is the router behind a full-tier filter (streamed text included:
// a stream goes only to the conversation's owner).
func (r *Router) Route() agent.Route {
	return agent.Route{Sink: r, Filter: event.Filter{Tier: event.TierFull}}
}

// Export routes e by its session id. It never blocks.
func (r *Router) Export(e event.Event) {
	if m := r.metrics.Load(); m != nil {
		m.observe(e)
	}
	if rc := r.record.Load(); rc != nil {
		rc.observe(e)
	}
	if e.Meta.SessionID == "" {
		return
	}
	r.mu.RLock()
	s := r.subs[e.Meta.SessionID]
	r.mu.RUnlock()
	if s != nil {
		s.push(e)
	}
}

// Flush does nothing: the router holds nothing for later.
func (r *Router) Flush(context.Context) error { return nil }

// Close does nothing; streams end with their turns.
func (r *Router) Close(context.Context) error { return nil }

// maxQueued bounds the events queued for one stream; past it events are
// dropped and the stream is told how many.
const maxQueued = 8192

type subscription struct {
	mu      sync.Mutex
	q       []event.Event
	dropped int
	ready   chan struct{} // one token: something was queued
}

func (r *Router) subscribe(sessionID string) *subscription {
	s := &subscription{ready: make(chan struct{}, 1)}
	r.mu.Lock()
	r.subs[sessionID] = s
	r.mu.Unlock()
	return s
}

func (r *Router) unsubscribe(sessionID string, s *subscription) {
	r.mu.Lock()
	if r.subs[sessionID] == s {
		delete(r.subs, sessionID)
	}
	r.mu.Unlock()
}

func (s *subscription) push(e event.Event) {
	s.mu.Lock()
	if len(s.q) >= maxQueued {
		s.dropped++
	} else {
		s.q = append(s.q, e)
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// take returns what is queued, and how many events were dropped since the
// last take.
func (s *subscription) take(buf []event.Event) ([]event.Event, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = append(buf[:0], s.q...)
	clear(s.q)
	s.q = s.q[:0]
	d := s.dropped
	s.dropped = 0
	return buf, d
}
