package host

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
)

// The usage counters carry the first maxMetricTenants tenants by name and
// the rest as "other"; a record adds to its tenant's counters each time.
func TestUsageMetricsBoundTenants(t *testing.T) {
	m := &metrics{usage: newUsageMetrics()}
	rec := func(tenant string, known bool) *UsageRecord {
		return &UsageRecord{Tenant: tenant, Cost: price.Nano(2e9), CostKnown: known,
			Usage: llm.TurnUsage{Models: map[string]llm.Usage{"m": {InputTokens: 10, OutputTokens: 5}}, SandboxCPU: 1500e6}}
	}
	for i := range maxMetricTenants {
		m.countUsage(rec("t"+strconv.Itoa(i), true))
	}
	m.countUsage(rec("t0", false))
	m.countUsage(rec("late-1", true))
	m.countUsage(rec("late-2", false))
	m.countUsage(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.usage.collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // metric/tenant
	labels := map[string]int{}
	for _, f := range fams {
		for _, x := range f.GetMetric() {
			got[f.GetName()+"/"+x.GetLabel()[0].GetValue()] = x.GetCounter().GetValue()
			labels[f.GetName()]++
		}
	}
	for k, want := range map[string]float64{
		"agentry_usage_turns_total/t0": 2, "agentry_usage_tokens_total/t0": 30, "agentry_usage_cost_usd_total/t0": 2,
		"agentry_usage_unknown_cost_turns_total/t0": 1, "agentry_usage_sandbox_seconds_total/t0": 3,
		"agentry_usage_turns_total/t499": 1, "agentry_usage_turns_total/other": 2, "agentry_usage_unknown_cost_turns_total/other": 1,
	} {
		if got[k] != want {
			t.Errorf("%s: %v, want %v", k, got[k], want)
		}
	}
	if labels["agentry_usage_turns_total"] != maxMetricTenants+1 {
		t.Errorf("%d tenant labels, want %d", labels["agentry_usage_turns_total"], maxMetricTenants+1)
	}
}
