package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// agentry usage sums the store's usage records by principal (or day,
// model, conversation), in a table, JSON or CSV, one tenant's or all;
// an unknown cost is counted apart.
func TestUsageCommandSumsTheRecords(t *testing.T) {
	t.Parallel()
	dsn := filepath.Join(t.TempDir(), "agentry.db")
	st, err := sqlite.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	prices, err := loadPrices("")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i, o := range []tool.Identity{{Tenant: "acme", Principal: "alice"}, {Tenant: "acme", Principal: "alice"}, {Tenant: "acme", Principal: "bob"}, {Tenant: "globex", Principal: "carol"}} {
		id := "c" + string(rune('0'+i))
		c := host.Conversation{ID: id, Owner: o, State: host.StateOpen, CreatedAt: now, UpdatedAt: now}
		if err := st.Create(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		model := "claude-sonnet-4-5"
		if o.Principal == "bob" {
			model = "homebrew"
		}
		u := &host.UsageRecord{Tenant: o.Tenant, Principal: o.Principal, Conversation: id, Kind: "message", Outcome: host.TurnAnswered,
			Started: now, Ended: now, Usage: llm.TurnUsage{ModelCalls: 1, Models: map[string]llm.Usage{model: {InputTokens: 100, OutputTokens: 10}}}}
		u.Cost, u.CostKnown, u.ModelCost, _ = prices.Cost(u.Usage)
		c.Turns = 1
		if _, err := st.Save(context.Background(), host.Update{Conversation: c, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered, Started: now, Ended: now, Usage: u}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	out, err := execute(t, "usage", "--store", dsn, "--tenant", "acme", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Rows []host.UsageRow }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Rows) != 3 || got.Rows[0].Key != "alice" || got.Rows[0].Turns != 2 || got.Rows[0].InputTokens != 200 ||
		got.Rows[1].Key != "bob" || got.Rows[1].UnknownCostTurns != 1 || got.Rows[1].CostUSD != 0 || got.Rows[2].Key != "total" || got.Rows[2].Turns != 3 {
		t.Fatalf("rows %+v", got.Rows)
	}
	// 100 input at $3 and 10 output at $15 per million, twice.
	if c := got.Rows[0].CostUSD; c < 0.00089 || c > 0.00091 {
		t.Fatalf("alice's cost %v", c)
	}
	csv, err := execute(t, "usage", "--store", dsn, "--by", "day", "--csv")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(csv), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], now.Format(time.DateOnly)+",4,") {
		t.Fatalf("csv:\n%s", csv)
	}
	if _, err := execute(t, "usage", "--store", dsn, "--by", "week"); err == nil {
		t.Fatal("--by week was taken")
	}
}
