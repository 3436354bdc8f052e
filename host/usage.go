package host

import (
	"cmp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
)

// UsageRecord is what one turn used, as the store keeps it beside the
// turn's log entry (written in the same transaction): whose turn it was,
// on which provider, its model calls and tokens per model, its tool calls
// by tool, its sandbox and agent time, how it ended, and what it cost by
// the price table of PriceVersion. A paused turn has one record for each
// stretch (up to the pause, then from the decision on). A turn that failed
// or was cancelled has one too, with what it used before it stopped.
type UsageRecord struct {
	Tenant, Principal, Conversation string
	// Seq is the turn-log entry the record belongs to.
	Seq      int64
	RunID    string
	Kind     string // "message" or "decision"
	Provider string
	Outcome  string
	Started  time.Time
	Ended    time.Time
	Usage    llm.TurnUsage
	// Cost is the estimated cost; CostKnown is false when a model that
	// used tokens is not in the price table (the cost is then unknown,
	// never zero).
	Cost         price.Nano
	CostKnown    bool
	PriceVersion string
	// ModelCost is the cost per model, for the models the table knows.
	ModelCost map[string]price.Nano
}

// UsageQuery selects usage records.
type UsageQuery struct {
	// Tenant and Principal narrow the records to one tenant, and to one
	// principal of it; empty is every one (an operator's read).
	Tenant, Principal string
	// Since and Until bound when the turns ended: Since ≤ ended < Until
	// (zero: unbounded).
	Since, Until time.Time
	// Limit bounds the answer (default and maximum MaxUsageRecords).
	Limit int
}

// MaxUsageRecords is the most records one UsageRecords call returns.
const MaxUsageRecords = 100000

// UsageTotal sums a principal's (or a tenant's) usage over a period: what
// budgets are checked against.
type UsageTotal struct {
	// Turns counts the messages that ran (a decision continues its turn).
	Turns  int64
	Tokens int64 // input and output tokens, the cached ones included
	// Cost sums the known costs; UnknownCost counts the turns whose cost
	// is unknown.
	Cost        price.Nano
	UnknownCost int64
	// Sandbox is the sandbox CPU time and agent wall time.
	Sandbox time.Duration
}

// usageRecord is the record of the turn t settles as turn.
func (h *Host) usageRecord(lc *liveConv, t *turnRun, turn *Turn) *UsageRecord {
	if t.kind != "message" && t.kind != "decision" {
		return nil
	}
	u := t.usage
	if !t.reported {
		u.Basis = llm.BasisNone
		u.Duration = turn.Ended.Sub(turn.Started)
	}
	rec := &UsageRecord{
		Tenant: lc.owner.Tenant, Principal: lc.owner.Principal, Conversation: lc.id,
		RunID: t.runID, Kind: t.kind, Provider: cmp.Or(lc.conv.Provider, h.key), Outcome: turn.Outcome,
		Started: turn.Started, Ended: turn.Ended, Usage: u, PriceVersion: h.prices.Version,
	}
	rec.Cost, rec.CostKnown, rec.ModelCost, _ = h.prices.Cost(u)
	return rec
}

// usageMetrics are the usage counters per tenant.
type usageMetrics struct {
	turns, tokens, cost, unknown, sandbox *prometheus.CounterVec // tenant
	mu                                    sync.Mutex
	tenants                               map[string]*tenantUsage
}

// tenantUsage is one tenant label's counters, looked up once: a turn
// adds to them without hashing its label five times.
type tenantUsage struct {
	turns, tokens, cost, unknown, sandbox prometheus.Counter
}

// maxMetricTenants bounds the tenant label: past it, further tenants
// are counted under "other".
const maxMetricTenants = 500

func newUsageMetrics() *usageMetrics {
	c := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"tenant"})
	}
	return &usageMetrics{
		turns:   c("agentry_usage_turns_total", "Turn stretches recorded, by tenant (the first 500 tenants seen; the rest as other)."),
		tokens:  c("agentry_usage_tokens_total", "Model tokens (input, cached input and output) the turns used, by tenant."),
		cost:    c("agentry_usage_cost_usd_total", "Estimated cost of the turns in US dollars, by tenant (turns of unknown cost are not in it)."),
		unknown: c("agentry_usage_unknown_cost_turns_total", "Turns whose cost is unknown (a model the price table lacks), by tenant."),
		sandbox: c("agentry_usage_sandbox_seconds_total", "Sandbox CPU and agent wall time the turns used, by tenant."),
		tenants: map[string]*tenantUsage{},
	}
}

func (u *usageMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{u.turns, u.tokens, u.cost, u.unknown, u.sandbox}
}

// of returns the counters of tenant's label: its own among the first
// maxMetricTenants tenants seen, else "other".
func (u *usageMetrics) of(tenant string) *tenantUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.tenants[tenant]; c != nil {
		return c
	}
	l := tenant
	if len(u.tenants) >= maxMetricTenants {
		l = "other"
		if c := u.tenants[l]; c != nil {
			return c
		}
	}
	c := &tenantUsage{turns: u.turns.WithLabelValues(l), tokens: u.tokens.WithLabelValues(l), cost: u.cost.WithLabelValues(l),
		unknown: u.unknown.WithLabelValues(l), sandbox: u.sandbox.WithLabelValues(l)}
	u.tenants[l] = c
	return c
}

// countUsage counts a record once it is stored.
func (m *metrics) countUsage(r *UsageRecord) {
	if r == nil {
		return
	}
	c := m.usage.of(r.Tenant)
	tok := r.Usage.Tokens()
	c.turns.Inc()
	c.tokens.Add(float64(tok.InputTokens + tok.OutputTokens))
	if r.CostKnown {
		c.cost.Add(r.Cost.USD())
	} else {
		c.unknown.Inc()
	}
	c.sandbox.Add((r.Usage.SandboxCPU + r.Usage.AgentWall).Seconds())
}
