package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memSink keeps what it receives.
type memSink struct {
	mu       sync.Mutex
	events   []event.Event
	flushErr error
	closeErr error
	closes   int
}

func (m *memSink) Export(e event.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}
func (m *memSink) Flush(context.Context) error { return m.flushErr }
func (m *memSink) Close(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closes++
	return m.closeErr
}
func (m *memSink) types() []event.Type {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ts []event.Type
	for _, e := range m.events {
		ts = append(ts, e.Type)
	}
	return ts
}

type panicSink struct{}

func (panicSink) Export(event.Event)              { panic("disk on fire") }
func (panicSink) Flush(context.Context) error     { panic("flush on fire") }
func (panicSink) Close(ctx context.Context) error { return nil }

func TestJSONShape(t *testing.T) {
	t.Parallel()
	e := event.Event{
		Type: tool.TypeSessionClosed,
		Payload: &tool.SessionClosed{Tool: "run_code", Scope: "run", KeyHash: "abcdef012345", RunnerID: "local",
			Label: "python", Reason: "run-end", HeldMs: 12.5, TookMs: 1},
		Meta: event.Meta{RunID: "run-1", Seq: 42, Time: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)},
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"agentry.tools.session_closed","payload":{"tool":"run_code","scope":"run","keyHash":"abcdef012345","runnerId":"local","label":"python","reason":"run-end","heldMs":12.5,"tookMs":1},"meta":{"runId":"run-1","seq":42,"time":"2026-11-30T09:00:00Z"}}`
	if string(b) != want {
		t.Fatalf("JSON =\n%s\nwant\n%s", b, want)
	}
}

func TestDecodeRoundTripsEveryType(t *testing.T) {
	t.Parallel()
	for _, typ := range event.Types() {
		p := event.NewPayload(typ)
		if p == nil {
			t.Fatalf("%s has no payload struct", typ)
		}
		if !strings.HasPrefix(string(typ), "agentry."+typ.Domain()+".") || typ.Domain() == "" {
			t.Fatalf("%s is not agentry.<domain>.<name>", typ)
		}
		// Payload JSON keys are camelCase.
		b, _ := json.Marshal(p)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		for k := range m {
			if strings.ContainsAny(k, "_-") || k[0] < 'a' || k[0] > 'z' {
				t.Fatalf("%s payload key %q is not camelCase", typ, k)
			}
		}
		in := event.Event{Type: typ, Payload: p, Meta: event.Meta{SessionID: "s", Seq: 1, Time: time.Unix(0, 0).UTC()}}
		line, _ := json.Marshal(in)
		out, err := event.Decode(line)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("%s: decoded %+v, want %+v", typ, out, in)
		}
	}
}

func TestDecodeRefusesBadLines(t *testing.T) {
	t.Parallel()
	for _, line := range []string{``, `{`, `[]`, `{"payload":{}}`, `{"type":"agentry.tool.end","payload":{"durationMs":"slow"}}`} {
		if _, err := event.Decode([]byte(line)); err == nil {
			t.Errorf("Decode(%q) succeeded", line)
		}
	}
	e, err := event.Decode([]byte(`{"type":"vendor.thing","payload":{"x":1}}`))
	if err != nil || string(e.Payload.(json.RawMessage)) != `{"x":1}` {
		t.Fatalf("unknown type: %+v, %v", e, err)
	}
}

func TestBusNumbersStampsAndFansOut(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bus := event.NewBus(event.BusOptions{Now: func() time.Time { return at }})
	a, b := &memSink{}, &memSink{}
	if err := bus.Add(a, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Add(b, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	given := at.Add(time.Hour)
	bus.Export(event.Event{Type: event.TypeTurnStart})
	bus.Export(event.Event{Type: event.TypeTurnEnd, Meta: event.Meta{Time: given, Seq: 99}})
	for _, s := range []*memSink{a, b} {
		if len(s.events) != 2 || s.events[0].Meta.Seq != 1 || s.events[1].Meta.Seq != 2 {
			t.Fatalf("events = %+v, want seq 1, 2", s.events)
		}
		if !s.events[0].Meta.Time.Equal(at) || !s.events[1].Meta.Time.Equal(given) {
			t.Fatal("the bus must stamp a zero time and keep a given one")
		}
	}
}

func TestFilters(t *testing.T) {
	t.Parallel()
	all := event.Types()
	tests := []struct {
		name   string
		filter event.Filter
		want   func(event.Type) bool
	}{
		{"zero is standard: no content", event.Filter{}, func(t event.Type) bool {
			return t != event.TypeLLMDelta && t != event.TypeLLMMessage
		}},
		{"full sees content", event.Filter{Tier: event.TierFull}, func(event.Type) bool { return true }},
		{"minimal: agent and error", event.Filter{Tier: event.TierMinimal}, func(t event.Type) bool {
			return t.Domain() == "agent" || t.Domain() == "error"
		}},
		{"type list", event.Filter{Types: []event.Type{tool.TypeCallEnd, event.TypeLLMEnd}}, func(t event.Type) bool {
			return t == tool.TypeCallEnd || t == event.TypeLLMEnd
		}},
		{"domain wildcard", event.Filter{Types: []event.Type{"agentry.tools.*"}}, func(t event.Type) bool { return t.Domain() == "tools" }},
		{"type list still obeys tier", event.Filter{Types: []event.Type{event.TypeLLMDelta, event.TypeLLMEnd}}, func(t event.Type) bool {
			return t == event.TypeLLMEnd
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bus := event.NewBus(event.BusOptions{})
			s := &memSink{}
			if err := bus.Add(s, tc.filter); err != nil {
				t.Fatal(err)
			}
			var want []event.Type
			for _, typ := range all {
				if bus.Enabled(typ) != tc.want(typ) {
					t.Errorf("Enabled(%s) = %v", typ, bus.Enabled(typ))
				}
				bus.Export(event.Event{Type: typ})
				if tc.want(typ) {
					want = append(want, typ)
				}
			}
			if got := s.types(); !reflect.DeepEqual(got, want) {
				t.Fatalf("received %v, want %v", got, want)
			}
		})
	}
}

func TestSamplingIsEvenAndSparesAuditEvents(t *testing.T) {
	t.Parallel()
	bus := event.NewBus(event.BusOptions{})
	s := &memSink{}
	if err := bus.Add(s, event.Filter{SampleRate: 0.25}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		bus.Export(event.Event{Type: tool.TypeCallEnd})
	}
	for range 10 {
		bus.Export(event.Event{Type: tool.TypeSessionClosed})
		bus.Export(event.Event{Type: event.TypeFatal})
	}
	count := map[event.Type]int{}
	for _, typ := range s.types() {
		count[typ]++
	}
	if count[tool.TypeCallEnd] != 25 || count[tool.TypeSessionClosed] != 10 || count[event.TypeFatal] != 10 {
		t.Fatalf("counts = %v, want 25 sampled tool ends and every session close and error", count)
	}
}

func TestAddRefusesNonsense(t *testing.T) {
	t.Parallel()
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(nil, event.Filter{}); err == nil {
		t.Error("nil sink accepted")
	}
	if err := bus.Add(&memSink{}, event.Filter{Tier: "verbose"}); err == nil || !strings.Contains(err.Error(), "verbose") {
		t.Errorf("unknown tier: %v", err)
	}
	if err := bus.Add(&memSink{}, event.Filter{SampleRate: -0.5}); err == nil {
		t.Error("negative sample rate accepted")
	}
	if bus.Len() != 0 {
		t.Fatal("a refused sink was attached")
	}
}

func TestPanickingSinkIsRecoveredAndReported(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reported []error
	bus := event.NewBus(event.BusOptions{OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	good := &memSink{}
	_ = bus.Add(panicSink{}, event.Filter{})
	_ = bus.Add(good, event.Filter{})
	bus.Export(event.Event{Type: event.TypeTurnStart})
	if len(good.events) != 1 {
		t.Fatal("a panicking sink kept the event from the next sink")
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "disk on fire") || !strings.Contains(reported[0].Error(), string(event.TypeTurnStart)) {
		t.Fatalf("reported = %v", reported)
	}
	if err := bus.Flush(context.Background()); err == nil || !strings.Contains(err.Error(), "flush on fire") {
		t.Fatalf("Flush = %v, want the recovered panic", err)
	}
}

func TestFlushAndCloseJoinErrorsAndCloseOnce(t *testing.T) {
	t.Parallel()
	errA, errB := errors.New("a broke"), errors.New("b broke")
	a, b := &memSink{flushErr: errA, closeErr: errA}, &memSink{closeErr: errB}
	var reported int
	bus := event.NewBus(event.BusOptions{OnError: func(error) { reported++ }})
	_ = bus.Add(a, event.Filter{})
	_ = bus.Add(b, event.Filter{})
	if err := bus.Flush(context.Background()); !errors.Is(err, errA) {
		t.Fatalf("Flush = %v", err)
	}
	err := bus.Close(context.Background())
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Fatalf("Close = %v, want both errors", err)
	}
	if err := bus.Close(context.Background()); err != nil || a.closes != 1 || b.closes != 1 {
		t.Fatalf("second Close = %v; closes %d, %d", err, a.closes, b.closes)
	}
	if reported != 2 {
		t.Fatalf("OnError heard %d failures, want 2", reported)
	}
}

func TestConcurrentExportGivesUniqueSequence(t *testing.T) {
	t.Parallel()
	bus := event.NewBus(event.BusOptions{})
	s := &memSink{}
	_ = bus.Add(s, event.Filter{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				bus.Export(event.Event{Type: tool.TypeCallStart})
			}
		})
	}
	wg.Wait()
	seen := make(map[uint64]bool)
	for _, e := range s.events {
		if seen[e.Meta.Seq] {
			t.Fatalf("seq %d twice", e.Meta.Seq)
		}
		seen[e.Meta.Seq] = true
	}
	if len(seen) != 4000 {
		t.Fatalf("%d events, want 4000", len(seen))
	}
}

func TestNoSinkNoAllocation(t *testing.T) {
	bus := event.NewBus(event.BusOptions{})
	p := &tool.CallEnd{Tool: "x"}
	e := event.Event{Type: tool.TypeCallEnd, Payload: p}
	if n := testing.AllocsPerRun(1000, func() { bus.Export(e) }); n != 0 {
		t.Fatalf("Export with no sink allocates %v times", n)
	}
	_ = bus.Add(nopSink{}, event.Filter{})
	if n := testing.AllocsPerRun(1000, func() { bus.Export(e) }); n != 0 {
		t.Fatalf("Export to a no-op sink allocates %v times", n)
	}
}

type nopSink struct{}

func (nopSink) Export(event.Event)          {}
func (nopSink) Flush(context.Context) error { return nil }
func (nopSink) Close(context.Context) error { return nil }

func TestMs(t *testing.T) {
	if got := event.Ms(1500 * time.Microsecond); got != 1.5 {
		t.Fatalf("Ms = %v", got)
	}
}

// A payload type registered by another package decodes into its struct;
// registering a type twice, or one of this package's, panics.
func TestRegisterDecodesAnotherPackagesPayload(t *testing.T) {
	t.Parallel()
	type sample struct {
		Label string `json:"label"`
		Count int    `json:"count"`
	}
	const typ event.Type = "agentry.test_register.sample"
	event.Register(typ, func() any { return new(sample) })
	if _, ok := event.NewPayload(typ).(*sample); !ok {
		t.Fatalf("NewPayload(%s) = %T", typ, event.NewPayload(typ))
	}
	e, err := event.Decode([]byte(`{"type":"agentry.test_register.sample","payload":{"label":"x","count":3},"meta":{"seq":1,"time":"2026-01-01T00:00:00Z"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := e.Payload.(*sample); !ok || p.Label != "x" || p.Count != 3 {
		t.Fatalf("decoded payload %#v", e.Payload)
	}
	for _, again := range []event.Type{typ, tool.TypeCallEnd, ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", again)
				}
			}()
			event.Register(again, func() any { return new(sample) })
		}()
	}
}
