package host

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// metrics are the host's Prometheus collectors, in a registry of its own
// (so several hosts in one process do not collide).
type metrics struct {
	reg       *prometheus.Registry
	turns     *prometheus.CounterVec   // kind, outcome
	durations *prometheus.HistogramVec // kind, outcome
	closes    *prometheus.CounterVec   // reason
	failures  *prometheus.CounterVec   // what
	refused   *prometheus.CounterVec   // limit
	opened    prometheus.Counter
	evicted   prometheus.Counter
	usage     *usageMetrics
	// liveTools counts tool sessions open now, from the events every
	// provider's tools send (started +1, closed or close_failed −1).
	liveTools atomic.Int64
}

func newMetrics(inMemory, cleanupsPending func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentry_host_turns_total",
			Help: "Turns the host ran, by kind (message, decision) and outcome (answered, paused, failed, cut).",
		}, []string{"kind", "outcome"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentry_host_turn_duration_seconds",
			Help:    "How long turns took, from admission to a saved result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"kind", "outcome"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentry_tool_session_closes_total",
			Help: "Tool sessions closed, by reason (call-end, run-end, session-end, shutdown, idle, evicted).",
		}, []string{"reason"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentry_host_failures_total",
			Help: "Failures, by what failed (turn, store, open, cleanup, tool_session_close, tool_panic).",
		}, []string{"what"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentry_host_admission_refused_total",
			Help: "Requests refused with 429, by the bound they hit.",
		}, []string{"limit"}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentry_host_sessions_opened_total",
			Help: "Conversations opened.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentry_host_sessions_evicted_total",
			Help: "Idle conversations evicted from memory.",
		}),
		usage: newUsageMetrics(),
	}
	m.reg.MustRegister(m.usage.collectors()...)
	m.reg.MustRegister(m.turns, m.durations, m.closes, m.failures, m.refused, m.opened, m.evicted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentry_tool_sessions_live",
			Help: "Tool sessions open now (sandboxes, interpreters, browsers), as their events report them.",
		}, func() float64 { return float64(max(m.liveTools.Load(), 0)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentry_host_cleanups_pending",
			Help: "Provider session closes that failed and are being retried.",
		}, cleanupsPending),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentry_host_sessions_in_memory",
			Help: "Conversations held in memory now.",
		}, inMemory),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// observe counts what the events report: tool-session closes and their
// failures, and tool panics.
func (m *metrics) observe(e event.Event) {
	switch e.Type {
	case tool.TypeSessionStarted:
		m.liveTools.Add(1)
	}
	switch e.Type {
	case tool.TypeSessionClosed:
		m.liveTools.Add(-1)
		if p, ok := e.Payload.(*tool.SessionClosed); ok {
			m.closes.WithLabelValues(p.Reason).Inc()
		}
	case tool.TypeSessionCloseFailed:
		m.liveTools.Add(-1)
		if p, ok := e.Payload.(*tool.SessionClosed); ok {
			m.closes.WithLabelValues(p.Reason).Inc()
		}
		m.failures.WithLabelValues("tool_session_close").Inc()
	case tool.TypePanic:
		m.failures.WithLabelValues("tool_panic").Inc()
	}
}
