package host_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/price"
)

const fullBudgets = `# every principal of acme: $5 and 2M tokens a UTC day
[[cap]]
tenant = "acme"
principal = "*"
per = "day"
cost_usd = 5.0
tokens = 2_000_000

# acme as a whole, per UTC month
[[cap]]
tenant = "acme"
per = "month"
turns = 10000
sandbox = "40h"

[[rate]]
tenant = "*"
principal = "*"
turns = 10
per = "1m"
`

func TestParseBudgets(t *testing.T) {
	b, err := host.ParseBudgets([]byte(fullBudgets))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Caps) != 2 || len(b.Rates) != 1 || b.String() != "2 caps, 1 rates" {
		t.Fatalf("%+v", b)
	}
	c := b.Caps[0]
	if c.Tenant != "acme" || c.Principal != "*" || c.Period != host.PeriodDay || c.Cost != price.Nano(5e9) ||
		c.Tokens != 2000000 || c.Turns != -1 || c.Sandbox != -1 || c.Line != 2 {
		t.Fatalf("cap 0: %+v", c)
	}
	if c := b.Caps[1]; c.Principal != "" || c.Period != host.PeriodMonth || c.Turns != 10000 || c.Sandbox != 40*time.Hour || c.Cost != -1 || c.Line != 10 {
		t.Fatalf("cap 1: %+v", c)
	}
	if r := b.Rates[0]; r.Turns != 10 || r.Per != time.Minute || r.Line != 16 {
		t.Fatalf("rate: %+v", r)
	}
	empty, err := host.ParseBudgets(nil)
	if err != nil || len(empty.Caps)+len(empty.Rates) != 0 {
		t.Fatalf("an empty file: %+v, %v", empty, err)
	}
}

// Every refusal says what is wrong, and where.
func TestParseBudgetsRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[[cap]]\ntenant = \"acme\"\nper = \"week\"\nturns = 1\n", `line 1: per = "week"`},
		{"[[cap]]\ntenant = \"acme\"\nturns = 1\n", "per = \"day\" or \"month\""},
		{"[[cap]]\nper = \"day\"\nturns = 1\n", "a cap needs tenant"},
		{"[[cap]]\ntenant = \"acme\"\nper = \"day\"\n", "at least one of turns"},
		{"[[cap]]\ntenant = \"acme\"\nper = \"day\"\nturns = -1\n", "not negative"},
		{"[[cap]]\ntenant = \"acme\"\nper = \"day\"\ncost_usd = -1.0\n", "cost_usd"},
		{"[[cap]]\ntenant = \"acme\"\nper = \"day\"\nsandbox = \"forever\"\n", `sandbox = "forever"`},
		{"[[cap]]\ntenant = \"a b\"\nper = \"day\"\nturns = 1\n", `tenant "a b"`},
		{"[[cap]]\ntenant = \"acme\"\nper = \"day\"\ncost = 1\n", "known keys"},
		{"[[rate]]\ntenant = \"acme\"\nprincipal = \"*\"\nturns = 0\nper = \"1m\"\n", "turns between 1"},
		{"[[rate]]\ntenant = \"acme\"\nprincipal = \"*\"\nturns = 5\nper = \"1ms\"\n", "from 1s to 744h"},
		{"[[rate]]\ntenant = \"acme\"\nturns = 5\nper = \"1m\"\n", "needs tenant and principal"},
		{"[[cap]\n", "line 1"},
		{"[[cap]]\ntenant = \"acme\"\nper = \"day\"\nturns = 1\n[[cap]]\ntenant = \"acme\"\nper = \"year\"\nturns = 1\n", "line 5"},
	} {
		_, err := host.ParseBudgets([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
	if _, err := host.ParseBudgets(make([]byte, host.MaxBudgetsBytes+1)); err == nil {
		t.Error("a file over the bound was read")
	}
}

// The parser never panics, refuses with a readable error, and what it
// accepts holds only valid caps and rates.
func FuzzParseBudgets(f *testing.F) {
	f.Add([]byte(fullBudgets))
	f.Add([]byte("[[cap]]\ntenant = \"acme\"\nprincipal = \"alice\"\nper = \"day\"\nturns = 3\n"))
	f.Add([]byte("[[rate]]\ntenant = \"*\"\nprincipal = \"*\"\nturns = 1\nper = \"1s\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := host.ParseBudgets(data)
		if err != nil {
			if !utf8.ValidString(err.Error()) && utf8.Valid(data) {
				t.Fatalf("error is not UTF-8: %q", err)
			}
			return
		}
		for _, c := range b.Caps {
			if c.Tenant == "" || (c.Period != host.PeriodDay && c.Period != host.PeriodMonth) ||
				c.Turns < -1 || c.Tokens < -1 || c.Cost < -1 || c.Sandbox < -1 ||
				(c.Turns < 0 && c.Tokens < 0 && c.Cost < 0 && c.Sandbox < 0) {
				t.Fatalf("accepted a bad cap %+v", c)
			}
		}
		for _, r := range b.Rates {
			if r.Tenant == "" || r.Principal == "" || r.Turns < 1 || r.Per < time.Second {
				t.Fatalf("accepted a bad rate %+v", r)
			}
		}
	})
}
