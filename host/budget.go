package host

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/agentry-dev/agentry/host/price"
)

// MaxBudgetsBytes bounds a budgets file: a few hundred caps fit in a
// fraction of it.
const MaxBudgetsBytes = 1 << 20

// maxBudgetEntries bounds the caps and rates of one file.
const maxBudgetEntries = 10000

// maxRateTurns bounds a rate's turns: the host keeps one timestamp per
// turn of the window for every principal it limits.
const maxRateTurns = 10000

// Budgets are the caps and turn rates a host holds its tenants and
// principals to (a budgets file, [ParseBudgets]). A cap bounds what the
// turns of one UTC day or month may use — cost, tokens, turns, sandbox
// time — for one tenant as a whole or for each principal; a rate bounds
// how many turns a principal may start in a sliding window. The zero
// value has none.
type Budgets struct {
	Caps  []Cap
	Rates []Rate
}

// Period is the calendar period a cap counts over, in UTC.
type Period string

const (
	// PeriodDay: a UTC day, from midnight to midnight.
	PeriodDay Period = "day"
	// PeriodMonth: a UTC calendar month.
	PeriodMonth Period = "month"
)

// Cap is one cap of a budgets file. Each of Turns, Tokens, Cost and
// Sandbox is a limit when it is not negative (0 allows nothing).
type Cap struct {
	// Tenant names the tenant, or is "*" for each tenant.
	Tenant string
	// Principal names one principal of the tenant, is "*" for each of
	// them on their own, or is empty for the tenant as a whole.
	Principal string
	Period    Period
	// Turns counts messages (a decision continues its turn); Tokens the
	// input (cached included) and output tokens; Cost the estimated cost
	// (turns of unknown cost are not in it); Sandbox the sandbox CPU time
	// and agent process time.
	Turns, Tokens int64
	Cost          price.Nano
	Sandbox       time.Duration
	// Line is where the cap is in its file.
	Line int
}

// Rate bounds how many turns (messages) one principal starts within a
// sliding window.
type Rate struct {
	// Tenant names the tenant, or is "*" for each tenant; Principal names
	// one principal, or is "*" for each.
	Tenant, Principal string
	Turns             int
	Per               time.Duration
	Line              int
}

// budgetsFile is a budgets file as TOML.
type budgetsFile struct {
	Cap  []capFile  `toml:"cap"`
	Rate []rateFile `toml:"rate"`
}

type capFile struct {
	Tenant    *string  `toml:"tenant"`
	Principal *string  `toml:"principal"`
	Per       *string  `toml:"per"`
	Turns     *int64   `toml:"turns"`
	Tokens    *int64   `toml:"tokens"`
	CostUSD   *float64 `toml:"cost_usd"`
	Sandbox   *string  `toml:"sandbox"`
}

type rateFile struct {
	Tenant    *string `toml:"tenant"`
	Principal *string `toml:"principal"`
	Turns     *int64  `toml:"turns"`
	Per       *string `toml:"per"`
}

// ParseBudgets reads a budgets file (TOML): [[cap]] tables, each with a
// tenant ("*" for each tenant), an optional principal ("*" for each
// principal; none for the tenant as a whole), per = "day" or "month"
// (UTC), and at least one of turns, tokens, cost_usd and sandbox (a
// duration, "2h"); and [[rate]] tables with tenant, principal, turns and
// per (a duration window, "1m"). Every problem is reported with its
// line, and a key agentry does not know is refused.
func ParseBudgets(data []byte) (*Budgets, error) {
	if len(data) > MaxBudgetsBytes {
		return nil, fmt.Errorf("host: the budgets file is over %d bytes; split it or drop unused caps", MaxBudgetsBytes)
	}
	var f budgetsFile
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return nil, fmt.Errorf("host: budgets file: %s (known keys: [[cap]] tenant, principal, per, turns, tokens, cost_usd, sandbox; [[rate]] tenant, principal, turns, per)", oneLineTOML(sm.String()))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, fmt.Errorf("host: budgets file: line %d: %s", row, strings.TrimPrefix(de.Error(), "toml: "))
		}
		return nil, fmt.Errorf("host: budgets file: %v", err)
	}
	if n := len(f.Cap) + len(f.Rate); n > maxBudgetEntries {
		return nil, fmt.Errorf("host: the budgets file has %d caps and rates; at most %d are allowed", n, maxBudgetEntries)
	}
	lines := tableLines(data)
	b := &Budgets{}
	var errs []error
	for i, c := range f.Cap {
		line := lines["cap"][min(i, len(lines["cap"])-1)]
		cp, err := c.check(line)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.Caps = append(b.Caps, cp)
	}
	for i, r := range f.Rate {
		line := lines["rate"][min(i, len(lines["rate"])-1)]
		rt, err := r.check(line)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.Rates = append(b.Rates, rt)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b, nil
}

// oneLineTOML keeps the first line of the TOML library's description.
func oneLineTOML(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "toml: ")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// tableLines finds the line of each [[cap]] and [[rate]] header, in
// order, so a refusal can say where the table is.
func tableLines(data []byte) map[string][]int {
	out := map[string][]int{"cap": {0}, "rate": {0}}
	seen := map[string]bool{}
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		for _, name := range []string{"cap", "rate"} {
			if strings.HasPrefix(l, "[["+name+"]]") {
				if !seen[name] {
					out[name], seen[name] = nil, true
				}
				out[name] = append(out[name], i+1)
			}
		}
	}
	return out
}

func budgetErr(line int, format string, args ...any) error {
	return fmt.Errorf("host: budgets file: line %d: "+format, append([]any{line}, args...)...)
}

// checkBudgetName checks a tenant or principal name of a budgets file:
// "*", or a name as identities have them.
func checkBudgetName(line int, what, v string) error {
	if v == "*" {
		return nil
	}
	if err := checkName(what, v); err != nil {
		return budgetErr(line, "%s %q: %v; give the name, or \"*\" for each", what, v, strings.TrimPrefix(err.Error(), "host: "))
	}
	return nil
}

func (c capFile) check(line int) (Cap, error) {
	cp := Cap{Line: line, Turns: -1, Tokens: -1, Cost: -1, Sandbox: -1}
	if c.Tenant == nil {
		return cp, budgetErr(line, "a cap needs tenant = \"NAME\" (or \"*\" for each tenant)")
	}
	if err := checkBudgetName(line, "tenant", *c.Tenant); err != nil {
		return cp, err
	}
	cp.Tenant = *c.Tenant
	if c.Principal != nil {
		if err := checkBudgetName(line, "principal", *c.Principal); err != nil {
			return cp, err
		}
		cp.Principal = *c.Principal
	}
	switch {
	case c.Per == nil:
		return cp, budgetErr(line, "a cap needs per = \"day\" or \"month\" (UTC periods)")
	case *c.Per == string(PeriodDay), *c.Per == string(PeriodMonth):
		cp.Period = Period(*c.Per)
	default:
		return cp, budgetErr(line, "per = %q: a cap's period is \"day\" or \"month\" (UTC)", *c.Per)
	}
	if c.Turns == nil && c.Tokens == nil && c.CostUSD == nil && c.Sandbox == nil {
		return cp, budgetErr(line, "a cap needs at least one of turns, tokens, cost_usd and sandbox")
	}
	if c.Turns != nil {
		if *c.Turns < 0 {
			return cp, budgetErr(line, "turns = %d: a cap is not negative", *c.Turns)
		}
		cp.Turns = *c.Turns
	}
	if c.Tokens != nil {
		if *c.Tokens < 0 {
			return cp, budgetErr(line, "tokens = %d: a cap is not negative", *c.Tokens)
		}
		cp.Tokens = *c.Tokens
	}
	if c.CostUSD != nil {
		v := *c.CostUSD
		if math.IsNaN(v) || v < 0 || v > 1e9 {
			return cp, budgetErr(line, "cost_usd = %v: give US dollars between 0 and 1e9", v)
		}
		cp.Cost = price.Nano(math.Round(v * 1e9))
	}
	if c.Sandbox != nil {
		d, err := time.ParseDuration(*c.Sandbox)
		if err != nil || d < 0 {
			return cp, budgetErr(line, "sandbox = %q: give a duration that is not negative, such as \"2h\"", *c.Sandbox)
		}
		cp.Sandbox = d
	}
	return cp, nil
}

func (r rateFile) check(line int) (Rate, error) {
	rt := Rate{Line: line}
	if r.Tenant == nil || r.Principal == nil {
		return rt, budgetErr(line, "a rate needs tenant and principal (each a name, or \"*\" for each)")
	}
	if err := checkBudgetName(line, "tenant", *r.Tenant); err != nil {
		return rt, err
	}
	if err := checkBudgetName(line, "principal", *r.Principal); err != nil {
		return rt, err
	}
	rt.Tenant, rt.Principal = *r.Tenant, *r.Principal
	if r.Turns == nil || *r.Turns < 1 || *r.Turns > maxRateTurns {
		return rt, budgetErr(line, "a rate needs turns between 1 and %d (a cap of turns = 0 is a [[cap]])", maxRateTurns)
	}
	rt.Turns = int(*r.Turns)
	if r.Per == nil {
		return rt, budgetErr(line, "a rate needs per = a duration window, such as \"1m\"")
	}
	d, err := time.ParseDuration(*r.Per)
	if err != nil || d < time.Second || d > 31*24*time.Hour {
		return rt, budgetErr(line, "per = %q: a rate's window is a duration from 1s to 744h, such as \"1m\"", *r.Per)
	}
	rt.Per = d
	return rt, nil
}

// String says in a few words what b holds, for a log line.
func (b *Budgets) String() string {
	if b == nil {
		return "no budgets"
	}
	return fmt.Sprintf("%d caps, %d rates", len(b.Caps), len(b.Rates))
}

// periodOf is the UTC period p that holds t: its start and its end.
func periodOf(p Period, t time.Time) (start, end time.Time) {
	t = t.UTC()
	if p == PeriodMonth {
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 0, 1)
}

// matches reports whether the cap or rate with these names applies to
// tenant and principal.
func matches(capTenant, capPrincipal, tenant, principal string) bool {
	if capTenant != "*" && capTenant != tenant {
		return false
	}
	return capPrincipal == "" || capPrincipal == "*" || capPrincipal == principal
}
