package postgres_test

import (
	"context"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var alice = tool.Identity{Tenant: "acme", Principal: "alice"}

func openLeases(t *testing.T, dsn, id string, ttl time.Duration) (*sqlstore.Store, *sqlstore.Leases) {
	t.Helper()
	st, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l, err := st.Leases(context.Background(), sqlstore.LeaseOptions{Replica: host.Replica{ID: id, Address: "http://" + id + ".test:8080"}, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return st, l
}

func create(t *testing.T, st *sqlstore.Store, id string, o tool.Identity) {
	t.Helper()
	now := time.Now().UTC()
	if err := st.Create(context.Background(), host.Conversation{ID: id, Owner: o, State: host.StateOpen, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
}

// lapse waits, bounded, until nobody holds a live lease on id.
func lapse(t *testing.T, l *sqlstore.Leases, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * l.TTL())
	for {
		h, err := l.Holder(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if h.ID == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s did not lapse within %s (held by %s, %s left)", id, 10*l.TTL(), h.ID, h.Left)
		}
		time.Sleep(h.Left) // the database says when it lapses
	}
}

func TestLeases(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	stA, a := openLeases(t, dsn, "rep-a", ttl)
	_, b := openLeases(t, dsn, "rep-b", ttl)
	create(t, stA, "ses_1", alice)

	// Nobody holds it: A takes it, fresh (no previous holder).
	c, err := a.Claim(ctx, alice, "ses_1")
	if err != nil || !c.Held || c.TakenFrom != "" || c.Epoch == 0 {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	// A again: a renewal, same epoch.
	c2, err := a.Claim(ctx, alice, "ses_1")
	if err != nil || !c2.Held || c2.Epoch != c.Epoch {
		t.Fatalf("renewing claim: %+v (first %+v), %v", c2, c, err)
	}
	// B is told A holds it, and where A is.
	cb, err := b.Claim(ctx, alice, "ses_1")
	if err != nil || cb.Held || cb.Holder.ID != "rep-a" || cb.Holder.Address != "http://rep-a.test:8080" || cb.Holder.Left <= 0 || cb.Holder.Left > ttl {
		t.Fatalf("B's claim while A holds it: %+v, %v", cb, err)
	}
	if h, err := b.Holder(ctx, "ses_1"); err != nil || h.ID != "rep-a" {
		t.Fatalf("holder: %+v, %v", h, err)
	}

	// Another owner's conversation, an unknown one and a closed one are
	// never leased, and nobody is named as their holder.
	for _, tc := range []struct {
		name string
		o    tool.Identity
		id   string
	}{{"another owner's", tool.Identity{Tenant: "acme", Principal: "mallory"}, "ses_1"}, {"unknown", alice, "ses_nope"}} {
		c, err := b.Claim(ctx, tc.o, tc.id)
		if err != nil || c.Held {
			t.Fatalf("%s conversation: %+v, %v", tc.name, c, err)
		}
	}
	create(t, stA, "ses_closed", alice)
	now := time.Now().UTC()
	if _, err := stA.Save(ctx, host.Update{Conversation: host.Conversation{ID: "ses_closed", Owner: alice, State: host.StateClosed, CreatedAt: now, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Claim(ctx, alice, "ses_closed"); err != nil || c.Held || c.Holder.ID != "" {
		t.Fatalf("closed conversation: %+v, %v", c, err)
	}

	// Renew keeps what A holds and reports nothing for what it does not.
	kept, err := a.Renew(ctx, []string{"ses_1", "ses_closed"})
	if err != nil || len(kept) != 1 || kept[0] != "ses_1" {
		t.Fatalf("renew: %v, %v", kept, err)
	}

	// A stops renewing: once its lease lapses, B takes it over, told from
	// whom, with a new epoch; A's renewal finds it lost.
	lapse(t, b, "ses_1")
	cb, err = b.Claim(ctx, alice, "ses_1")
	if err != nil || !cb.Held || cb.TakenFrom != "rep-a" || cb.Epoch == c.Epoch {
		t.Fatalf("takeover: %+v, %v", cb, err)
	}
	if kept, err := a.Renew(ctx, []string{"ses_1"}); err != nil || len(kept) != 0 {
		t.Fatalf("A renewing a lease B took: %v, %v", kept, err)
	}
	if c, err := a.Claim(ctx, alice, "ses_1"); err != nil || c.Held || c.Holder.ID != "rep-b" {
		t.Fatalf("A claiming back a live lease of B: %+v, %v", c, err)
	}

	// A clean release frees it at once: the next claim is not a takeover.
	if err := a.Release(ctx, []string{"ses_1"}); err != nil { // not A's: changes nothing
		t.Fatal(err)
	}
	if h, _ := a.Holder(ctx, "ses_1"); h.ID != "rep-b" {
		t.Fatalf("A's release of B's lease changed it: %+v", h)
	}
	if err := b.Release(ctx, []string{"ses_1"}); err != nil {
		t.Fatal(err)
	}
	if h, err := a.Holder(ctx, "ses_1"); err != nil || h.ID != "" {
		t.Fatalf("after B's release: %+v, %v", h, err)
	}
	ca, err := a.Claim(ctx, alice, "ses_1")
	if err != nil || !ca.Held || ca.TakenFrom != "" || ca.Epoch == cb.Epoch || ca.Epoch == c.Epoch {
		t.Fatalf("claim after a release: %+v, %v", ca, err)
	}
}

// Of replicas claiming one conversation at once, exactly one holds it,
// and every other is told which.
func TestLeasesConcurrentClaims(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	const n = 6
	var ls []*sqlstore.Leases
	var st0 *sqlstore.Store
	for i := range n {
		st, l := openLeases(t, dsn, "rep-"+string(rune('a'+i)), 5*time.Second)
		if i == 0 {
			st0 = st
		}
		ls = append(ls, l)
	}
	for round := range 5 {
		id := "ses_race" + string(rune('0'+round))
		create(t, st0, id, alice)
		var wg sync.WaitGroup
		claims := make([]host.Claim, n)
		errs := make([]error, n)
		for i, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				claims[i], errs[i] = l.Claim(ctx, alice, id)
			}()
		}
		wg.Wait()
		winner := ""
		for i, c := range claims {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if c.Held {
				if winner != "" {
					t.Fatalf("round %d: both %s and %s hold the lease", round, winner, ls[i].Replica().ID)
				}
				winner = ls[i].Replica().ID
			}
		}
		if winner == "" {
			t.Fatalf("round %d: nobody holds the lease: %+v", round, claims)
		}
		for i, c := range claims {
			if !c.Held && c.Holder.ID != winner {
				t.Fatalf("round %d: %s was told %q holds it, not %s", round, ls[i].Replica().ID, c.Holder.ID, winner)
			}
		}
	}
}

func TestLeasesRefused(t *testing.T) {
	dsn := pgtest.DSN(t)
	st, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct {
		o    sqlstore.LeaseOptions
		want string
	}{
		{sqlstore.LeaseOptions{}, "http://"},
		{sqlstore.LeaseOptions{Replica: host.Replica{Address: "ftp://x"}}, "http://"},
		{sqlstore.LeaseOptions{Replica: host.Replica{Address: "http://x"}, TTL: time.Millisecond}, "too short"},
		{sqlstore.LeaseOptions{Replica: host.Replica{Address: "http://x"}, TTL: -time.Second}, "negative"},
	} {
		if _, err := st.Leases(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.o, err, tc.want)
		}
	}
	l, err := st.Leases(context.Background(), sqlstore.LeaseOptions{Replica: host.Replica{Address: "http://x:1"}})
	if err != nil || !strings.HasPrefix(l.Replica().ID, "rep-") || l.TTL() != host.DefaultLeaseTTL {
		t.Fatalf("defaults: %+v %s, %v", l.Replica(), l.TTL(), err)
	}
}
