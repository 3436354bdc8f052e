package host

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
)

// EventSink is the host's [event.Sink] (it was called Router): it hands
// each event of a conversation to the request streaming that
// conversation's turn (SSE), feeds the console's record, and counts what
// the metrics report. Attach it with [EventSink.Filter] wherever the
// provider's events go (for a native agent, agent.Route{Sink: router,
// Filter: router.Filter()} in its Routes) and pass it as Options.EventSink;
// or let New make one on the host's bus.
type EventSink struct {
	mu   sync.RWMutex
	subs map[string]*subscription

	metrics atomic.Pointer[metrics]
	record  atomic.Pointer[record] // what the console shows (console_record.go)
	owned   atomic.Bool
}

// NewEventSink returns a router with no subscribers.
func NewEventSink() *EventSink { return &EventSink{subs: make(map[string]*subscription)} }

// Filter is the filter to attach the router with: the full tier
// (streamed text included: a stream goes only to the conversation's
// owner).
func (r *EventSink) Filter() event.Filter { return event.Filter{Tier: event.TierFull} }

// Export routes e by its session id. It never blocks.
func (r *EventSink) Export(e event.Event) {
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
func (r *EventSink) Flush(context.Context) error { return nil }

// Close does nothing; streams end with their turns.
func (r *EventSink) Close(context.Context) error { return nil }

// maxQueued bounds the events queued for one stream; past it events are
// dropped and the stream is told how many.
const maxQueued = 8192

// item is one thing queued for a stream: a bus event, a provider output
// or a session interaction.
type item struct {
	e           event.Event
	output      *provider.Output
	interaction *InteractionView
}

type subscription struct {
	mu      sync.Mutex
	q       []item
	dropped int
	ready   chan struct{} // one token: something was queued
}

func (r *EventSink) subscribe(sessionID string) *subscription {
	s := &subscription{ready: make(chan struct{}, 1)}
	r.mu.Lock()
	r.subs[sessionID] = s
	r.mu.Unlock()
	return s
}

func (r *EventSink) unsubscribe(sessionID string, s *subscription) {
	r.mu.Lock()
	if r.subs[sessionID] == s {
		delete(r.subs, sessionID)
	}
	r.mu.Unlock()
}

func (s *subscription) push(e event.Event) { s.add(item{e: e}) }

// pushOutput queues one of the turn's provider outputs.
func (s *subscription) pushOutput(o provider.Output) { s.add(item{output: &o}) }

// tell shows a session interaction on the stream of the conversation's
// turn, if one is open.
func (r *EventSink) tell(sessionID string, v *InteractionView) {
	r.mu.RLock()
	s := r.subs[sessionID]
	r.mu.RUnlock()
	if s != nil {
		s.pushInteraction(v)
	}
}

// pushInteraction queues a session interaction the stream should show.
func (s *subscription) pushInteraction(v *InteractionView) { s.add(item{interaction: v}) }

func (s *subscription) add(it item) {
	s.mu.Lock()
	if len(s.q) >= maxQueued {
		s.dropped++
	} else {
		s.q = append(s.q, it)
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// take returns what is queued, and how many events were dropped since the
// last take.
func (s *subscription) take(buf []item) ([]item, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = append(buf[:0], s.q...)
	clear(s.q)
	s.q = s.q[:0]
	d := s.dropped
	s.dropped = 0
	return buf, d
}
