package host

import (
	"context"
	"sync"
	"time"
)

// budgetCacheTTL is how long a period's total read from the store is
// used before it is read again. Between reads, the turns this host saves
// are added as they are saved; turns other replicas save count from the
// next read.
const budgetCacheTTL = 5 * time.Second

// maxBudgetCache bounds the totals held; past it, the stale ones go.
const maxBudgetCache = 100000

// totalKey is one period's total of a principal ("" who: the tenant's).
type totalKey struct {
	tenant, who string
	start       time.Time
}

type cachedTotal struct {
	t    UsageTotal
	read time.Time // on the host's clock, just before the store was read
}

// usageTotals is what admission checks caps against: each period's total
// from the store, kept up to date between reads with the records this
// host saves, so a turn does not cost a sum over the period's records.
type usageTotals struct {
	mu sync.Mutex
	m  map[totalKey]*cachedTotal
}

// get returns the total of k, reading the store when it has none fresh.
func (u *usageTotals) get(ctx context.Context, st Store, k totalKey, now time.Time) (UsageTotal, error) {
	u.mu.Lock()
	if c, ok := u.m[k]; ok && now.Sub(c.read) < budgetCacheTTL {
		t := c.t
		u.mu.Unlock()
		return t, nil
	}
	u.mu.Unlock()
	t, err := st.UsageTotal(ctx, k.tenant, k.who, k.start)
	if err != nil {
		return UsageTotal{}, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[totalKey]*cachedTotal{}
	}
	if len(u.m) >= maxBudgetCache {
		for key, c := range u.m {
			if now.Sub(c.read) >= budgetCacheTTL {
				delete(u.m, key)
			}
		}
	}
	if len(u.m) < maxBudgetCache {
		u.m[k] = &cachedTotal{t: t, read: now}
	}
	return t, nil
}

// add counts a record this host saved in the totals it holds. A record
// that ended before a total was read is in what the store answered.
func (u *usageTotals) add(r *UsageRecord) {
	if r == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.m) == 0 { // no budgets, or none read yet
		return
	}
	tok := r.Usage.Tokens()
	day, _ := periodOf(PeriodDay, r.Ended)
	month, _ := periodOf(PeriodMonth, r.Ended)
	for _, k := range [...]totalKey{{r.Tenant, r.Principal, day}, {r.Tenant, r.Principal, month}, {r.Tenant, "", day}, {r.Tenant, "", month}} {
		c, ok := u.m[k]
		if !ok || r.Ended.Before(c.read) {
			continue
		}
		if r.Kind == "message" {
			c.t.Turns++
		}
		c.t.Tokens += int64(tok.InputTokens + tok.OutputTokens)
		if r.CostKnown {
			c.t.Cost += r.Cost
		} else {
			c.t.UnknownCost++
		}
		c.t.Sandbox += r.Usage.SandboxCPU + r.Usage.AgentWall
	}
}
