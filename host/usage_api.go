package host

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// UsageRow sums the usage records that share a key: a day (UTC,
// YYYY-MM-DD), a conversation, a model or a principal.
type UsageRow struct {
	Key string `json:"key"`
	// Turns counts the messages that ran (a decision continues a turn,
	// so it adds none); by model, the turns that called the model.
	Turns            int64 `json:"turns"`
	ModelCalls       int64 `json:"modelCalls"`
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	CacheReadTokens  int64 `json:"cacheReadTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens"`
	ToolCalls        int64 `json:"toolCalls"`
	// SandboxSeconds is sandbox CPU time and agent wall time.
	SandboxSeconds float64 `json:"sandboxSeconds"`
	// CostUSD sums the known costs; UnknownCostTurns counts the records
	// whose cost is unknown (a model the price table lacks), which are
	// not in CostUSD.
	CostUSD          float64 `json:"costUsd"`
	UnknownCostTurns int64   `json:"unknownCostTurns"`
	cost             price.Nano
}

// UsageBy are the keys usage sums by.
var UsageBy = []string{"day", "conversation", "model", "principal"}

// SummarizeUsage sums records by a key of UsageBy, in key order.
func SummarizeUsage(recs []UsageRecord, by string) ([]UsageRow, error) {
	if !slices.Contains(UsageBy, by) {
		return nil, fmt.Errorf("host: usage sums by one of %s, not %q", strings.Join(UsageBy, ", "), by)
	}
	rows := map[string]*UsageRow{}
	row := func(k string) *UsageRow {
		r := rows[k]
		if r == nil {
			r = &UsageRow{Key: k}
			rows[k] = r
		}
		return r
	}
	for i := range recs {
		rec := &recs[i]
		turn := int64(0)
		if rec.Kind == "message" {
			turn = 1
		}
		if by == "model" {
			for m, tok := range rec.Usage.Models {
				r := row(m)
				r.Turns += turn
				r.InputTokens += int64(tok.InputTokens)
				r.OutputTokens += int64(tok.OutputTokens)
				r.CacheReadTokens += int64(tok.CacheReadTokens)
				r.CacheWriteTokens += int64(tok.CacheWriteTokens)
				if c, ok := rec.ModelCost[m]; ok {
					r.cost += c
				} else if tok != (llm.Usage{}) {
					r.UnknownCostTurns++
				}
			}
			continue
		}
		var k string
		switch by {
		case "day":
			k = rec.Ended.UTC().Format(time.DateOnly)
		case "conversation":
			k = rec.Conversation
		case "principal":
			k = rec.Principal
		}
		r := row(k)
		r.Turns += turn
		r.ModelCalls += int64(rec.Usage.ModelCalls)
		tok := rec.Usage.Tokens()
		r.InputTokens += int64(tok.InputTokens)
		r.OutputTokens += int64(tok.OutputTokens)
		r.CacheReadTokens += int64(tok.CacheReadTokens)
		r.CacheWriteTokens += int64(tok.CacheWriteTokens)
		for _, n := range rec.Usage.ToolCalls {
			r.ToolCalls += int64(n)
		}
		r.SandboxSeconds += (rec.Usage.SandboxCPU + rec.Usage.AgentWall).Seconds()
		if rec.CostKnown {
			r.cost += rec.Cost
		} else {
			r.UnknownCostTurns++
		}
	}
	out := make([]UsageRow, 0, len(rows))
	for _, r := range rows {
		r.CostUSD = r.cost.USD()
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b UsageRow) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// ParseUsageTime reads a bound of a usage query: an RFC 3339 time, a
// date (YYYY-MM-DD, midnight UTC), or an age back from now ("7d", "12h",
// "30m").
func ParseUsageTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 36600 {
			return now.AddDate(0, 0, -n), nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("host: %q is not a time; give an RFC 3339 time, a date (2026-12-01) or an age (7d, 12h)", s)
}

// usageQuery reads since, until and by from a request (since defaults to
// 30 days back; by to day).
func (h *Host) usageQuery(r *http.Request, q *UsageQuery) (by string, err error) {
	v := r.URL.Query()
	now := h.now()
	q.Since = now.AddDate(0, 0, -30)
	if s := v.Get("since"); s != "" {
		if q.Since, err = ParseUsageTime(s, now); err != nil {
			return "", err
		}
	}
	if s := v.Get("until"); s != "" {
		if q.Until, err = ParseUsageTime(s, now); err != nil {
			return "", err
		}
	}
	by = v.Get("by")
	if by == "" {
		by = "day"
	}
	if !slices.Contains(UsageBy, by) {
		return "", errors.New("host: by is one of " + strings.Join(UsageBy, ", "))
	}
	return by, nil
}

// usageAnswer is the body of a usage read.
type usageAnswer struct {
	Tenant    string     `json:"tenant"`
	Principal string     `json:"principal,omitempty"`
	Since     time.Time  `json:"since"`
	Until     *time.Time `json:"until,omitempty"`
	By        string     `json:"by"`
	Rows      []UsageRow `json:"rows"`
	Total     UsageRow   `json:"total"`
	// Truncated: more records matched than one read sums; narrow the
	// period.
	Truncated bool `json:"truncated,omitempty"`
}

// handleUsage answers GET /v1/usage: the caller's own usage, summed.
func (h *Host) handleUsage(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	q := UsageQuery{Tenant: o.Tenant, Principal: o.Principal}
	h.answerUsage(w, r, q, "principal")
}

// handleTenantUsage answers GET /v1/tenants/{tenant}/usage for the
// tenant's admins: every principal's usage (by principal, day, model or
// conversation).
func (h *Host) handleTenantUsage(w http.ResponseWriter, r *http.Request, _ tool.Identity) {
	tenant, ok := h.adminTenant(w, r)
	if !ok {
		return
	}
	h.answerUsage(w, r, UsageQuery{Tenant: tenant}, "")
}

// answerUsage sums the records of q by the request's key; refused is a
// key the reader may not use.
func (h *Host) answerUsage(w http.ResponseWriter, r *http.Request, q UsageQuery, refused string) {
	by, err := h.usageQuery(r, &q)
	if err == nil && by == refused {
		err = errors.New("host: your own usage sums by day, conversation or model; a tenant's admins read it by principal under /v1/tenants/{tenant}/usage")
	}
	if err != nil {
		writeError(w, newError(http.StatusBadRequest, CodeInvalidField, err.Error()))
		return
	}
	recs, err := h.store.UsageRecords(r.Context(), q)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	ans := usageAnswer{Tenant: q.Tenant, Principal: q.Principal, Since: q.Since.UTC(), By: by, Truncated: len(recs) >= MaxUsageRecords}
	if !q.Until.IsZero() {
		u := q.Until.UTC()
		ans.Until = &u
	}
	ans.Rows, _ = SummarizeUsage(recs, by)
	ans.Total = TotalUsage(recs)
	writeJSON(w, http.StatusOK, ans)
}

// TotalUsage sums every record into one row (its key is "total").
func TotalUsage(recs []UsageRecord) UsageRow {
	rows, _ := SummarizeUsage(recs, "principal")
	t := UsageRow{Key: "total"}
	for _, r := range rows {
		t.Turns += r.Turns
		t.ModelCalls += r.ModelCalls
		t.InputTokens += r.InputTokens
		t.OutputTokens += r.OutputTokens
		t.CacheReadTokens += r.CacheReadTokens
		t.CacheWriteTokens += r.CacheWriteTokens
		t.ToolCalls += r.ToolCalls
		t.SandboxSeconds += r.SandboxSeconds
		t.cost += r.cost
		t.UnknownCostTurns += r.UnknownCostTurns
	}
	t.CostUSD = t.cost.USD()
	return t
}
