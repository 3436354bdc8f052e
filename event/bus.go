package event

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tier is how much a sink wants to see.
type Tier string

const (
	// TierMinimal: agent and error events only.
	TierMinimal Tier = "minimal"
	// TierStandard: everything but content (streamed text, whole
	// messages). The default.
	TierStandard Tier = "standard"
	// TierFull: everything, content included.
	TierFull Tier = "full"
)

// Filter chooses the events one sink receives. The zero Filter is the
// standard tier, every type, no sampling.
type Filter struct {
	// Types, when not empty, lists the types the sink receives. An entry
	// ending in ".*" names a whole domain ("agentry.tools.*").
	Types []Type
	// Tier defaults to TierStandard.
	Tier Tier
	// SampleRate in (0, 1) keeps that fraction of events, evenly spread.
	// 0 or ≥ 1 keeps all. Errors and tool-session lifecycle events are
	// never sampled out: they are what an operator audits.
	SampleRate float64
}

// BusOptions configure a Bus.
type BusOptions struct {
	// OnError hears about sinks that panicked (recovered) and failures in
	// Flush and Close. Default: log with slog.Default.
	OnError func(error)
	// Now stamps events that carry no time (default time.Now).
	Now func() time.Time
}

// Bus fans events out to sinks, each behind its own filter. It numbers the
// events it sees (Meta.Seq, per bus) and stamps their time. It is safe for
// concurrent use, and itself a Sink, so buses nest.
type Bus struct {
	seq     atomic.Uint64
	sinks   atomic.Pointer[[]*route]
	mu      sync.Mutex // serialises Add
	onError func(error)
	now     func() time.Time
	closed  atomic.Bool
}

type route struct {
	sink    Sink
	types   map[Type]struct{}
	domains []string // "agentry.tools." for "agentry.tools.*"
	tier    Tier
	rate    float64
	seen    atomic.Uint64
}

// NewBus returns a bus with no sinks.
func NewBus(opt BusOptions) *Bus {
	b := &Bus{onError: opt.OnError, now: opt.Now}
	if b.onError == nil {
		b.onError = func(err error) { slog.Error("agentry event bus", "err", err) }
	}
	if b.now == nil {
		b.now = time.Now
	}
	return b
}

// Add attaches a sink behind a filter. Events exported before Add are not
// replayed.
func (b *Bus) Add(s Sink, f Filter) error {
	if s == nil {
		return errors.New("event: Bus.Add: nil sink")
	}
	switch f.Tier {
	case "":
		f.Tier = TierStandard
	case TierMinimal, TierStandard, TierFull:
	default:
		return fmt.Errorf("event: unknown tier %q; use minimal, standard or full", f.Tier)
	}
	if math.IsNaN(f.SampleRate) || f.SampleRate < 0 {
		return fmt.Errorf("event: sample rate %v is not in [0, 1]", f.SampleRate)
	}
	r := &route{sink: s, tier: f.Tier, rate: f.SampleRate}
	if r.rate >= 1 {
		r.rate = 0
	}
	for _, t := range f.Types {
		if d, ok := strings.CutSuffix(string(t), "*"); ok {
			r.domains = append(r.domains, d)
			continue
		}
		if r.types == nil {
			r.types = make(map[Type]struct{})
		}
		r.types[t] = struct{}{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var next []*route
	if cur := b.sinks.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, r)
	b.sinks.Store(&next)
	return nil
}

// Len returns the number of sinks attached.
func (b *Bus) Len() int {
	if cur := b.sinks.Load(); cur != nil {
		return len(*cur)
	}
	return 0
}

// Enabled reports whether any sink would receive an event of type t, so a
// caller can skip building a payload nobody reads.
func (b *Bus) Enabled(t Type) bool {
	cur := b.sinks.Load()
	if cur == nil {
		return false
	}
	for _, r := range *cur {
		if r.wants(t) {
			return true
		}
	}
	return false
}

// Export numbers e, stamps its time when zero, and hands it to every sink
// whose filter accepts it. A sink that panics is recovered and reported
// through OnError; the other sinks still receive the event.
func (b *Bus) Export(e Event) {
	cur := b.sinks.Load()
	if cur == nil {
		return
	}
	e.Meta.Seq = b.seq.Add(1)
	if e.Meta.Time.IsZero() {
		e.Meta.Time = b.now()
	}
	for _, r := range *cur {
		if r.wants(e.Type) && r.sample(e.Type) {
			b.deliver(r.sink, e)
		}
	}
}

func (b *Bus) deliver(s Sink, e Event) {
	defer func() {
		if v := recover(); v != nil {
			b.onError(fmt.Errorf("event: sink %T panicked exporting %s (recovered): %v", s, e.Type, v))
		}
	}()
	s.Export(e)
}

// Flush flushes every sink, bounded by ctx, and joins their errors.
func (b *Bus) Flush(ctx context.Context) error {
	return b.each(ctx, "flush", Sink.Flush)
}

// Close closes every sink once, bounded by ctx, and joins their errors.
// Later calls return nil.
func (b *Bus) Close(ctx context.Context) error {
	if b.closed.Swap(true) {
		return nil
	}
	return b.each(ctx, "close", Sink.Close)
}

func (b *Bus) each(ctx context.Context, what string, f func(Sink, context.Context) error) error {
	cur := b.sinks.Load()
	if cur == nil {
		return nil
	}
	var errs []error
	for _, r := range *cur {
		if err := b.call(ctx, what, r.sink, f); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		b.onError(err)
	}
	return err
}

func (b *Bus) call(ctx context.Context, what string, s Sink, f func(Sink, context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("event: sink %T panicked in %s (recovered): %v", s, what, v)
		}
	}()
	if err := f(s, ctx); err != nil {
		return fmt.Errorf("event: %s %T: %w", what, s, err)
	}
	return nil
}

func (r *route) wants(t Type) bool {
	if r.types != nil || r.domains != nil {
		_, ok := r.types[t]
		for _, d := range r.domains {
			if ok {
				break
			}
			ok = strings.HasPrefix(string(t), d)
		}
		if !ok {
			return false
		}
	}
	switch r.tier {
	case TierFull:
		return true
	case TierMinimal:
		d := t.Domain()
		return d == "agent" || d == "error"
	}
	return !isContent(t)
}

// sample keeps rate of the events, spread evenly: the n-th event passes when
// floor(n·rate) moves.
func (r *route) sample(t Type) bool {
	if r.rate == 0 || neverSampled(t) {
		return true
	}
	n := r.seen.Add(1)
	return math.Floor(float64(n)*r.rate) > math.Floor(float64(n-1)*r.rate)
}

func neverSampled(t Type) bool {
	return strings.HasPrefix(string(t), "agentry.error.") || strings.HasPrefix(string(t), "agentry.tools.session_")
}
