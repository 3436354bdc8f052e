package host

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// TypeBudgetCrossed: a turn crossed a cap while it ran; it was given one
// wrap-up model call without tools.
const TypeBudgetCrossed event.Type = "agentry.host.budget_crossed"

func init() { event.Register(TypeBudgetCrossed, func() any { return new(BudgetCrossed) }) }

// BudgetCrossed is the payload of budget_crossed.
type BudgetCrossed struct {
	// Cap says which cap, in words; RunID is the turn's.
	Cap   string `json:"cap"`
	RunID string `json:"runId"`
}

// SetBudgets replaces the caps and rates the host holds turns to (nil:
// none). Turns running keep the budget they started under; a rate's
// window carries over when the rate is unchanged.
func (h *Host) SetBudgets(b *Budgets) {
	h.budgets.Store(b)
}

// rateKey is one principal under one rate.
type rateKey struct {
	tenant, principal string // the rate's, as written
	turns             int
	per               time.Duration
	owner             tool.Identity
}

// rateWindows holds, per principal and rate, when its turns in the window
// began (at most the rate's turns each).
type rateWindows struct {
	mu   sync.Mutex
	seen map[rateKey][]time.Time
}

// maxRateKeys bounds the windows held: past it, windows that have
// emptied are dropped first.
const maxRateKeys = 100000

// admit takes a slot of every rate of b that applies to o, or returns
// the first rate that has none and when one frees.
func (w *rateWindows) admit(b *Budgets, o tool.Identity, now time.Time) (*Rate, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[rateKey][]time.Time{}
	}
	var keys []rateKey
	for i := range b.Rates {
		r := &b.Rates[i]
		if !matches(r.Tenant, r.Principal, o.Tenant, o.Principal) {
			continue
		}
		k := rateKey{r.Tenant, r.Principal, r.Turns, r.Per, o}
		ts := w.seen[k]
		for len(ts) > 0 && !ts[0].After(now.Add(-r.Per)) {
			ts = ts[1:]
		}
		w.seen[k] = ts
		if len(ts) >= r.Turns {
			return r, ts[0].Add(r.Per).Sub(now)
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		w.seen[k] = append(w.seen[k], now)
	}
	if len(w.seen) > maxRateKeys {
		for k, ts := range w.seen {
			if len(ts) == 0 || !ts[len(ts)-1].After(now.Add(-k.per)) {
				delete(w.seen, k)
			}
		}
	}
	return nil, 0
}

// capLeft is what one cap leaves a turn: the cap, how much of it the
// period used before the turn began.
type capLeft struct {
	c    Cap
	used UsageTotal
	who  string // the principal, or "" for the tenant as a whole
}

// turnBudget is a turn's share of the caps that apply to it, read when
// it was admitted; limit is the provider's TurnRequest.Limit.
type turnBudget struct {
	h       *Host
	owner   tool.Identity
	conv    string
	runID   string
	caps    []capLeft
	crossed sync.Once
}

// admitBudget refuses a turn past a cap or a rate of the host's budgets
// (429 budget_exhausted), and otherwise returns what the caps leave it
// (nil when no cap bounds it mid-way). A message is a turn; a decision
// continues one, so only the caps other than turns, and no rate, apply
// to it.
func (h *Host) admitBudget(ctx context.Context, o tool.Identity, kind string) (*turnBudget, *apiError) {
	b := h.budgets.Load()
	if b == nil || len(b.Caps) == 0 && len(b.Rates) == 0 {
		return nil, nil
	}
	now := h.now()
	tb := &turnBudget{h: h, owner: o}
	for _, c := range b.Caps {
		if !matches(c.Tenant, c.Principal, o.Tenant, o.Principal) {
			continue
		}
		who := o.Principal
		if c.Principal == "" {
			who = ""
		}
		start, end := periodOf(c.Period, now)
		t, err := h.totals.get(ctx, h.store, totalKey{o.Tenant, who, start}, now)
		if err != nil {
			return nil, h.storeError(err)
		}
		running := int64(0)
		if kind == "message" {
			running = h.turnsRunning(o, who) - 1 // this one is admitted already
		}
		if what, used, limit := c.exhausted(t, running, kind); what != "" {
			retry := int(math.Ceil(end.Sub(now).Seconds()))
			msg := fmt.Sprintf("host: budget exhausted: %s is used up (%s of %s this %s); it resets at %s (UTC); ask your operator for more, or wait",
				describeCap(c, o, what), used, limit, c.Period, end.Format(time.RFC3339))
			return nil, h.refuse(o, "budget", 0, max(retry, 1), CodeBudgetExhausted, msg)
		}
		if c.Tokens >= 0 || c.Cost >= 0 || c.Sandbox >= 0 {
			tb.caps = append(tb.caps, capLeft{c: c, used: t, who: who})
		}
	}
	if kind == "message" {
		if r, wait := h.rates.admit(b, o, now); r != nil {
			msg := fmt.Sprintf("host: budget exhausted: you may start %d turns per %s and have; the next may start in %s",
				r.Turns, r.Per, wait.Round(time.Second))
			return nil, h.refuse(o, "turn_rate", r.Turns, max(int(math.Ceil(wait.Seconds())), 1), CodeBudgetExhausted, msg)
		}
	}
	if len(tb.caps) == 0 {
		return nil, nil
	}
	return tb, nil
}

// turnsRunning counts the turns running for o (who set) or for o's
// tenant as a whole (who empty).
func (h *Host) turnsRunning(o tool.Identity, who string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if who != "" {
		return int64(h.byOwner[o])
	}
	n := 0
	for owner, k := range h.byOwner {
		if owner.Tenant == o.Tenant {
			n += k
		}
	}
	return int64(n)
}

// exhausted says which limit of c the period's usage t (and running
// turns not in it yet) has reached: its name, how much was used and the
// limit, as words; "" when none.
func (c Cap) exhausted(t UsageTotal, running int64, kind string) (what, used, limit string) {
	switch {
	case kind == "message" && c.Turns >= 0 && t.Turns+running >= c.Turns:
		return "turns", fmt.Sprint(t.Turns + running), fmt.Sprint(c.Turns)
	case c.Tokens >= 0 && t.Tokens >= c.Tokens:
		return "tokens", fmt.Sprint(t.Tokens), fmt.Sprint(c.Tokens)
	case c.Cost >= 0 && t.Cost >= c.Cost:
		return "cost", usd(t.Cost), usd(c.Cost)
	case c.Sandbox >= 0 && t.Sandbox >= c.Sandbox:
		return "sandbox time", t.Sandbox.Round(time.Second).String(), c.Sandbox.String()
	}
	return "", "", ""
}

func usd(n price.Nano) string { return fmt.Sprintf("$%.4f", n.USD()) }

// describeCap names a cap in words: "the daily turns cap of principal
// alice (tenant acme)".
func describeCap(c Cap, o tool.Identity, what string) string {
	period := "daily"
	if c.Period == PeriodMonth {
		period = "monthly"
	}
	whose := fmt.Sprintf("principal %s (tenant %s)", o.Principal, o.Tenant)
	if c.Principal == "" {
		whose = "tenant " + o.Tenant + " as a whole"
	}
	return fmt.Sprintf("the %s %s cap of %s (line %d of the budgets file)", period, what, whose, c.Line)
}

// limit is the turn's TurnRequest.Limit: the first cap that what the turn
// used so far, on top of what its period used before it, reaches. The
// first crossing is an event.
func (tb *turnBudget) limit(used llm.TurnUsage) string {
	tok := used.Tokens()
	tokens := int64(tok.InputTokens + tok.OutputTokens)
	cost, _, _, _ := tb.h.prices.Cost(used)
	sandbox := used.SandboxCPU + used.AgentWall
	for _, cl := range tb.caps {
		c, u := cl.c, cl.used
		var what string
		switch {
		case c.Tokens >= 0 && u.Tokens+tokens >= c.Tokens:
			what = "tokens"
		case c.Cost >= 0 && u.Cost+cost >= c.Cost:
			what = "cost"
		case c.Sandbox >= 0 && u.Sandbox+sandbox >= c.Sandbox:
			what = "sandbox time"
		default:
			continue
		}
		desc := describeCap(c, tb.owner, what)
		tb.crossed.Do(func() {
			tb.h.metrics.refused.WithLabelValues("budget_crossed").Inc()
			tb.h.emit(TypeBudgetCrossed, &BudgetCrossed{Cap: desc, RunID: tb.runID}, tb.conv, tb.owner)
		})
		return desc
	}
	return ""
}

// limitFor is the Limit a turn's request carries: nil without a budget.
func (tb *turnBudget) limitFor(conv, runID string) func(llm.TurnUsage) string {
	if tb == nil {
		return nil
	}
	tb.conv, tb.runID = conv, runID
	return tb.limit
}
