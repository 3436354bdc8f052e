package price_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
)

// The shipped table prices the models the docs name, by their dated
// names too; a model it lacks has an unknown cost, never zero.
func TestShippedTable(t *testing.T) {
	tb := price.Default()
	if tb.Version == "" {
		t.Fatal("the shipped table has no version")
	}
	for _, m := range []string{"claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "gpt-4o-mini", "gpt-4o", "gpt-4o-2024-08-06", "gemini-2.5-flash"} {
		if _, ok := tb.Lookup(m); !ok {
			t.Errorf("%s is not priced", m)
		}
	}
	// The longest prefix wins: gpt-4o-mini is not priced as gpt-4o.
	if e, _ := tb.Lookup("gpt-4o-mini-2024-07-18"); e.Input != 0.15 {
		t.Fatalf("gpt-4o-mini priced as %+v", e)
	}
	u := llm.TurnUsage{Models: map[string]llm.Usage{
		"claude-sonnet-4-5-20250929": {InputTokens: 1_000_000, OutputTokens: 1_000_000, CacheReadTokens: 200_000, CacheWriteTokens: 100_000},
	}}
	cost, ok, per, unknown := tb.Cost(u)
	// 700k plain input at $3, 1M output at $15, 200k cache reads at
	// $0.30, 100k cache writes at $3.75.
	want := 2.1 + 15 + 0.06 + 0.375
	if !ok || unknown != nil || math.Abs(cost.USD()-want) > 1e-9 || per["claude-sonnet-4-5-20250929"] != cost {
		t.Fatalf("cost %v %v %v %v, want %v", cost.USD(), ok, per, unknown, want)
	}
	u.Models["llama3.2"] = llm.Usage{InputTokens: 10}
	u.Models["quiet"] = llm.Usage{} // no tokens: nothing to price
	if cost, ok, _, unknown := tb.Cost(u); ok || cost != 0 || len(unknown) != 1 || unknown[0] != "llama3.2" {
		t.Fatalf("with an unknown model: %v %v %v", cost, ok, unknown)
	}
}

// An operator's table replaces the shipped one; omitted cache prices are
// the input price; a bad table is refused with what is wrong.
func TestParse(t *testing.T) {
	tb, err := price.Parse([]byte(`{"version":"ours-1","prices":[{"model":"local*","input":0,"output":0},{"model":"m","input":2,"output":4}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok, _, _ := tb.Cost(llm.TurnUsage{Models: map[string]llm.Usage{"local-llama": {InputTokens: 5000}}}); !ok || c != 0 {
		t.Fatalf("a free local model: %v %v", c, ok)
	}
	if c, _, _, _ := tb.Cost(llm.TurnUsage{Models: map[string]llm.Usage{"m": {InputTokens: 1000, CacheReadTokens: 500}}}); c.USD() != 0.002 {
		t.Fatalf("cache reads at the input price: %v", c.USD())
	}
	for _, bad := range []struct{ in, says string }{
		{`{"prices":[]}`, "version"},
		{`{"version":"v","prices":[{"model":"","input":1,"output":1}]}`, "model"},
		{`{"version":"v","prices":[{"model":"a*b","input":1,"output":1}]}`, `"*"`},
		{`{"version":"v","prices":[{"model":"a","input":-1,"output":1}]}`, "input"},
		{`{"version":"v","prices":[{"model":"a","input":1,"output":1},{"model":"a","input":1,"output":1}]}`, "twice"},
		{`{"version":"v","prices":[],"extra":1}`, "unknown field"},
		{`{"version":"v","prices":[]} {}`, "one table"},
		{`not json`, "JSON"},
	} {
		if _, err := price.Parse([]byte(bad.in)); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("%s: %v, want it to say %q", bad.in, err, bad.says)
		}
	}
}

func FuzzParse(f *testing.F) {
	shipped, err := os.ReadFile("prices.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	f.Add([]byte(`{"version":"v","prices":[{"model":"a*","input":1e5,"output":0,"cacheRead":0}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, err := price.Parse(data)
		if err != nil {
			return
		}
		if tb.Version == "" {
			t.Fatal("a table without a version parsed")
		}
		// Whatever parses prices any usage without overflow or NaN.
		u := llm.TurnUsage{Models: map[string]llm.Usage{"a": {InputTokens: 1 << 30, OutputTokens: 1 << 30}, "b": {InputTokens: 1}}}
		if c, ok, _, _ := tb.Cost(u); ok && (c < 0 || math.IsNaN(c.USD())) {
			t.Fatalf("cost %v", c)
		}
	})
}
