package host_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/llm"
)

func mustBudgets(t *testing.T, s string) *host.Budgets {
	t.Helper()
	b, err := host.ParseBudgets([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A cap of 3 turns a day for one principal: the 4th answers 429
// budget_exhausted with Retry-After at the UTC day's end and a message
// naming the cap; another principal is unaffected; a new cap applies
// at once; the next day the count starts again.
func TestBudgetTurnsPerDay(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)}
			b := mustBudgets(t, "[[cap]]\ntenant = \"acme\"\nprincipal = \"alice\"\nper = \"day\"\nturns = 3\n")
			f := newFixture(t, config{dsn: sk.dsn(t), opt: host.Options{Now: clock.Now, Budgets: b}})
			id, bob := f.open("alice"), f.open("bob")
			for i := range 3 {
				want(t, f.say("alice", id, "hello "+strconv.Itoa(i)), http.StatusOK, "")
			}
			r := f.say("alice", id, "one more")
			want(t, r, http.StatusTooManyRequests, "budget_exhausted")
			if ra := r.header.Get("Retry-After"); ra != "3600" {
				t.Fatalf("Retry-After %q, want 3600 (the UTC day ends in an hour)", ra)
			}
			if msg := string(r.body); !strings.Contains(msg, "daily turns cap of principal alice") || !strings.Contains(msg, "3 of 3") {
				t.Fatalf("the refusal does not name the cap: %s", msg)
			}
			want(t, f.say("bob", bob, "hello"), http.StatusOK, "")

			f.h.SetBudgets(mustBudgets(t, "[[cap]]\ntenant = \"acme\"\nprincipal = \"alice\"\nper = \"day\"\nturns = 4\n"))
			want(t, f.say("alice", id, "one more"), http.StatusOK, "")
			want(t, f.say("alice", id, "and another"), http.StatusTooManyRequests, "budget_exhausted")

			clock.Advance(time.Hour)
			want(t, f.say("alice", id, "a new day"), http.StatusOK, "")
		})
	}
}

// A tenant-wide cap counts every principal of the tenant together, and
// no other tenant.
func TestBudgetTenantAsAWhole(t *testing.T) {
	b := mustBudgets(t, "[[cap]]\ntenant = \"acme\"\nper = \"month\"\nturns = 2\n")
	f := newFixture(t, config{opt: host.Options{Budgets: b}})
	a, bo, c := f.open("alice"), f.open("bob"), f.open("carol")
	want(t, f.say("alice", a, "one"), http.StatusOK, "")
	want(t, f.say("bob", bo, "two"), http.StatusOK, "")
	r := f.say("alice", a, "three")
	want(t, r, http.StatusTooManyRequests, "budget_exhausted")
	if !strings.Contains(string(r.body), "tenant acme as a whole") {
		t.Fatalf("%s", r.body)
	}
	want(t, f.say("carol", c, "globex is another tenant"), http.StatusOK, "")
}

// A per-principal turn rate: past it 429 with Retry-After until a turn
// leaves the window; each principal has a window of their own.
func TestBudgetTurnRate(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
	b := mustBudgets(t, "[[rate]]\ntenant = \"*\"\nprincipal = \"*\"\nturns = 2\nper = \"1m\"\n")
	f := newFixture(t, config{opt: host.Options{Now: clock.Now, Budgets: b}})
	id, bob := f.open("alice"), f.open("bob")
	want(t, f.say("alice", id, "one"), http.StatusOK, "")
	clock.Advance(20 * time.Second)
	want(t, f.say("alice", id, "two"), http.StatusOK, "")
	r := f.say("alice", id, "three")
	want(t, r, http.StatusTooManyRequests, "budget_exhausted")
	if ra := r.header.Get("Retry-After"); ra != "40" {
		t.Fatalf("Retry-After %q, want 40", ra)
	}
	want(t, f.say("bob", bob, "one"), http.StatusOK, "")
	clock.Advance(41 * time.Second)
	want(t, f.say("alice", id, "three"), http.StatusOK, "")
	if n := len(f.rec.ofType(host.TypeAdmissionRefused)); n != 1 {
		t.Fatalf("%d admission_refused events, want 1", n)
	}
}

// A turn that crosses a tokens cap mid-way finishes its step, then gets
// one wrap-up model call with tools withheld; the crossing is an event;
// the next turn is refused.
func TestBudgetCrossedMidTurn(t *testing.T) {
	b := mustBudgets(t, "[[cap]]\ntenant = \"acme\"\nprincipal = \"*\"\nper = \"day\"\ntokens = 1000\n")
	var wrapUps int
	f := newFixture(t, config{opt: host.Options{Budgets: b}, agentOpt: func(o *agent.Options) {
		o.Model = wrapUpCounter{pricedModel{}, &wrapUps}
	}})
	id := f.open("alice")
	r := f.say("alice", id, `call files {"op":"write","name":"a","text":"x"}`)
	want(t, r, http.StatusOK, "")
	if out := r.json(t)["output"].(string); !strings.Contains(out, "crossed its limit") {
		t.Fatalf("the wrap-up call was not told why: %q", out)
	}
	if wrapUps != 1 {
		t.Fatalf("%d wrap-up calls, want 1", wrapUps)
	}
	if _, opened, _ := f.ws.stats(); opened != 1 {
		t.Fatalf("the files tool opened %d workspaces, want 1 (the step before the crossing)", opened)
	}
	ev := f.rec.ofType(host.TypeBudgetCrossed)
	if len(ev) != 1 || !strings.Contains(ev[0].Payload.(*host.BudgetCrossed).Cap, "daily tokens cap of principal alice") {
		t.Fatalf("budget_crossed events %v", ev)
	}
	want(t, f.say("alice", id, "more"), http.StatusTooManyRequests, "budget_exhausted")
	// bob has a cap of his own.
	want(t, f.say("bob", f.open("bob"), "hello"), http.StatusOK, "")
}

// wrapUpCounter counts the model calls asked for with tool calls withheld.
type wrapUpCounter struct {
	pricedModel
	n *int
}

func (m wrapUpCounter) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if req.NoToolCalls {
		*m.n++
	}
	return m.pricedModel.Generate(ctx, req)
}

var _ event.Type = host.TypeBudgetCrossed
