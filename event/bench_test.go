package event_test

import (
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

var benchEvent = event.Event{
	Type:    tool.TypeCallEnd,
	Payload: &tool.CallEnd{Tool: "run_code", ToolCallID: "call-1", DurationMs: 1.25},
	Meta:    event.Meta{RunID: "run-1", SessionID: "s-1"},
}

// BenchmarkBusExportNoSink is the cost of emitting when nobody listens.
func BenchmarkBusExportNoSink(b *testing.B) {
	bus := event.NewBus(event.BusOptions{})
	b.ReportAllocs()
	for b.Loop() {
		bus.Export(benchEvent)
	}
}

// BenchmarkBusExportNopSink is one event through numbering, stamping and a
// standard-tier filter to a sink that does nothing.
func BenchmarkBusExportNopSink(b *testing.B) {
	bus := event.NewBus(event.BusOptions{})
	_ = bus.Add(nopSink{}, event.Filter{})
	b.ReportAllocs()
	for b.Loop() {
		bus.Export(benchEvent)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
