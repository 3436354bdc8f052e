package host_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/tool"
)

// One suite, every store.
func TestStore(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			for _, c := range storeCases {
				t.Run(c.name, func(t *testing.T) {
					dsn := sk.dsn(t)
					s := openStore(t, dsn)
					defer s.Close()
					c.run(t, s, dsn)
				})
			}
		})
	}
}

var (
	alice = tool.Identity{Tenant: "acme", Principal: "alice"}
	bob   = tool.Identity{Tenant: "acme", Principal: "bob"}
	t0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func conv(id string, o tool.Identity) host.Conversation {
	return host.Conversation{ID: id, Owner: o, Provider: "p", State: host.StateOpen, CreatedAt: t0, UpdatedAt: t0}
}

var storeCases = []struct {
	name string
	run  func(t *testing.T, s host.Store, dsn string)
}{
	{"create and load", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c1", alice)); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, conv("c1", bob)); !errors.Is(err, host.ErrExists) {
			t.Fatalf("a taken id: %v", err)
		}
		c, err := s.Load(ctx, alice, "c1")
		if err != nil || c.ID != "c1" || c.Owner != alice || c.State != host.StateOpen || c.Version != 0 || !c.CreatedAt.Equal(t0) || len(c.Transcript) != 0 || c.Provider != "p" {
			t.Fatalf("load: %+v %v", c, err)
		}
		if _, err := s.Load(ctx, bob, "c1"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner loads it: %v", err)
		}
		if _, err := s.Load(ctx, tool.Identity{Tenant: "other", Principal: "alice"}, "c1"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("the same principal of another tenant loads it: %v", err)
		}
		if _, err := s.Load(ctx, alice, "nope"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("a missing id: %v", err)
		}
	}},
	{"keeps the agent profile and model a conversation was opened with", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		c := conv("c1", alice)
		c.Agent, c.Model = "claude", "opus"
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, conv("c2", alice)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load(ctx, alice, "c1")
		if err != nil || got.Agent != "claude" || got.Model != "opus" {
			t.Fatalf("load: agent %q model %q, %v", got.Agent, got.Model, err)
		}
		got.Turns = 1
		if _, err := s.Save(ctx, host.Update{Conversation: got, Turn: &host.Turn{RunID: "run-1", Kind: "message", Outcome: host.TurnAnswered, Started: t0, Ended: t0}}); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, alice, host.ListOptions{})
		if err != nil || len(list) != 2 {
			t.Fatalf("list: %d, %v", len(list), err)
		}
		for _, c := range list {
			want := [2]string{"claude", "opus"}
			if c.ID == "c2" {
				want = [2]string{} // opened without: the default agent, its own model
			}
			if [2]string{c.Agent, c.Model} != want {
				t.Fatalf("%s after a save: agent %q model %q, want %q", c.ID, c.Agent, c.Model, want)
			}
		}
	}},
	{"refuses what makes no sense", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		for _, c := range []host.Conversation{
			{ID: "", Owner: alice, State: host.StateOpen},
			{ID: "x", Owner: tool.Identity{Tenant: "acme"}, State: host.StateOpen},
			{ID: "x", Owner: alice, State: "weird"},
			{ID: "x", Owner: alice, State: host.StatePaused},
			{ID: "x", Owner: tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "x"}, State: host.StateOpen},
		} {
			if err := s.Create(ctx, c); err == nil {
				t.Fatalf("created %+v", c)
			}
		}
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		c := conv("c", alice)
		c.State = host.StatePaused
		if _, err := s.Save(ctx, host.Update{Conversation: c}); err == nil {
			t.Fatal("saved a pause without its question")
		}
	}},
	{"save is versioned and transactional", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		c := conv("c", alice)
		c.Turns, c.LastRunID, c.UpdatedAt = 1, "run-1", t0.Add(time.Second)
		c.Binding = "b-1"
		add := []host.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello", RunID: "run-1"}}
		v, err := s.Save(ctx, host.Update{Conversation: c, Append: add, Turn: &host.Turn{RunID: "run-1", Kind: "message", Outcome: host.TurnAnswered, Started: t0, Ended: t0}})
		if err != nil || v != 1 {
			t.Fatalf("save: %d %v", v, err)
		}
		// A writer that read version 0 loses: nothing of it is written.
		stale := c
		stale.Turns = 99
		if _, err := s.Save(ctx, host.Update{Conversation: stale, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}}); !errors.Is(err, host.ErrConflict) {
			t.Fatalf("stale save: %v", err)
		}
		got, _ := s.Load(ctx, alice, "c")
		if got.Turns != 1 || got.Version != 1 || got.LastRunID != "run-1" || got.Binding != "b-1" || got.Messages != 2 ||
			len(got.Transcript) != 2 || got.Transcript[1] != add[1] {
			t.Fatalf("after a refused save: %+v", got)
		}
		ts, _ := s.Turns(ctx, alice, "c")
		if len(ts) != 1 || ts[0].Seq != 1 || ts[0].RunID != "run-1" {
			t.Fatalf("turn log: %+v", ts)
		}
		// Another owner cannot save over it.
		other := got
		other.Owner = bob
		if _, err := s.Save(ctx, host.Update{Conversation: other}); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner's save: %v", err)
		}
		if _, err := s.Turns(ctx, bob, "c"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner's turn log: %v", err)
		}
	}},
	{"the transcript only grows, one row a message", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		c := conv("c", alice)
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		v, err := s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: "one"}, {Role: "assistant", Content: "two"}}})
		if err != nil {
			t.Fatal(err)
		}
		c.Version, c.Messages = v, 2
		if v, err = s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: "three"}}}); err != nil {
			t.Fatal(err)
		}
		c.Version, c.Messages = v, 3
		got, err := s.Load(ctx, alice, "c")
		if err != nil || len(got.Transcript) != 3 || got.Transcript[2].Content != "three" || got.Messages != 3 {
			t.Fatalf("load: %+v %v", got.Transcript, err)
		}
		// A save that believes fewer messages are stored is a conflict.
		stale := c
		stale.Messages = 1
		if _, err := s.Save(ctx, host.Update{Conversation: stale, Append: []host.Message{{Role: "user", Content: "x"}}}); !errors.Is(err, host.ErrConflict) {
			t.Fatalf("a save from a stale count: %v", err)
		}
		got, _ = s.Load(ctx, alice, "c")
		if len(got.Transcript) != 3 {
			t.Fatalf("%d messages after a refused save", len(got.Transcript))
		}
		info, err := s.Info(ctx, alice, "c")
		if err != nil || info.Transcript != nil || info.Version != got.Version || info.Messages != 3 {
			t.Fatalf("info: %+v %v", info, err)
		}
		if _, err := s.Info(ctx, bob, "c"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner's info: %v", err)
		}
	}},
	{"a pause names its request", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		c := conv("c", alice)
		c.State, c.Pending = host.StatePaused, &host.Pending{Question: "deploy?", Tool: "deploy", Kind: "approval", RequestID: "req-1", TurnID: "run-1",
			Args: json.RawMessage(`{"target":"prod","code":"print(1)\n<script>x</script>"}`)}
		v, err := s.Save(ctx, host.Update{Conversation: c})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := s.Load(ctx, alice, "c")
		if l.State != host.StatePaused || l.Pending == nil || !reflect.DeepEqual(*l.Pending, *c.Pending) {
			t.Fatalf("paused: %+v", l)
		}
		l.State, l.Pending, l.Version = host.StateOpen, nil, v
		if _, err := s.Save(ctx, host.Update{Conversation: l}); err != nil {
			t.Fatal(err)
		}
		if l, _ = s.Load(ctx, alice, "c"); l.Pending != nil {
			t.Fatalf("a cleared pause: %+v", l.Pending)
		}
	}},
	{"a turn-log entry alone keeps the version", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		c := conv("c", alice)
		v, err := s.Save(ctx, host.Update{Conversation: c, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AppendTurn(ctx, alice, "c", host.Turn{Kind: "cleanup", Outcome: host.TurnCleanupFailed, Error: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendTurn(ctx, bob, "c", host.Turn{Kind: "cleanup"}); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner's entry: %v", err)
		}
		c.Version = v
		if _, err := s.Save(ctx, host.Update{Conversation: c, Turn: &host.Turn{Kind: "close", Outcome: host.TurnClosed}}); err != nil {
			t.Fatalf("a save after a log-only entry: %v", err)
		}
		ts, _ := s.Turns(ctx, alice, "c")
		if len(ts) != 3 || ts[0].Seq != 1 || ts[1].Seq != 2 || ts[1].Kind != "cleanup" || ts[2].Seq != 3 {
			t.Fatalf("turn log: %+v", ts)
		}
	}},
	{"list and count by owner", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		for i := range 5 {
			c := conv(fmt.Sprintf("a%d", i), alice)
			c.CreatedAt = t0.Add(time.Duration(i) * time.Minute) // listings run newest first by creation
			c.UpdatedAt = c.CreatedAt
			if err := s.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Create(ctx, conv("b0", bob)); err != nil {
			t.Fatal(err)
		}
		closed, _ := s.Info(ctx, alice, "a1")
		closed.State = host.StateClosed
		if _, err := s.Save(ctx, host.Update{Conversation: closed}); err != nil {
			t.Fatal(err)
		}
		all, err := s.List(ctx, alice, host.ListOptions{})
		if err != nil || len(all) != 5 || all[0].ID != "a4" || all[4].ID != "a0" {
			t.Fatalf("list: %v %v", ids(all), err)
		}
		open, _ := s.List(ctx, alice, host.ListOptions{OpenOnly: true, Limit: 3})
		if len(open) != 3 || open[0].ID != "a4" {
			t.Fatalf("open list: %v", ids(open))
		}
		for _, c := range open {
			if c.ID == "a1" {
				t.Fatal("a closed conversation in the open list")
			}
		}
		if n, err := s.CountOpen(ctx, alice); err != nil || n != 4 {
			t.Fatalf("count: %d %v", n, err)
		}
		if n, _ := s.CountOpen(ctx, bob); n != 1 {
			t.Fatalf("bob's count: %d", n)
		}
		b, _ := s.List(ctx, bob, host.ListOptions{})
		if len(b) != 1 || b[0].ID != "b0" {
			t.Fatalf("bob's list: %v", ids(b))
		}
	}},
	{"a cursor walks a listing once, however it changes meanwhile", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		for i := range 7 {
			c := conv(fmt.Sprintf("p%d", i), alice)
			c.CreatedAt = t0.Add(time.Duration(i/2) * time.Minute) // pairs share a creation time: the id breaks the tie
			c.UpdatedAt = c.CreatedAt
			if err := s.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		var seen []string
		var after *host.ListCursor
		for page := 0; ; page++ {
			cs, err := s.List(ctx, alice, host.ListOptions{Limit: 3, After: after})
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, ids(cs)...)
			if page == 0 { // a change while walking moves nothing: the order is by creation
				c, _ := s.Info(ctx, alice, "p0")
				c.UpdatedAt = t0.Add(time.Hour)
				if _, err := s.Save(ctx, host.Update{Conversation: c}); err != nil {
					t.Fatal(err)
				}
			}
			if len(cs) < 3 {
				break
			}
			last := cs[len(cs)-1]
			after = &host.ListCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		if got := strings.Join(seen, " "); got != "p6 p5 p4 p3 p2 p1 p0" {
			t.Fatalf("walked %s", got)
		}
		tenant, _ := s.ListTenant(ctx, "acme", host.ListOptions{Limit: 2, After: &host.ListCursor{CreatedAt: t0.Add(time.Minute), ID: "p3"}})
		if got := strings.Join(ids(tenant), " "); got != "p2 p1" {
			t.Fatalf("the tenant's page after p3: %s", got)
		}
	}},
	{"the sweep removes closed conversations past the cut-off and keeps their usage", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		for _, id := range []string{"old", "recent", "open"} {
			if err := s.Create(ctx, conv(id, alice)); err != nil {
				t.Fatal(err)
			}
		}
		// Standing rules: one scoped to each conversation, and one that
		// holds everywhere; the swept conversation's rule goes with it.
		for i, conv := range []string{"old", "recent", "open", ""} {
			r := host.Rule{ID: fmt.Sprintf("rul_%032x", i), Owner: alice, Tool: "Bash", Conversation: conv,
				Match: host.MatchCommand, Pattern: "git status", CreatedAt: t0.Add(time.Duration(i) * time.Second)}
			if err := s.AddRule(ctx, r, 10); err != nil {
				t.Fatal(err)
			}
		}
		for _, x := range []struct {
			id    string
			state host.State
			at    time.Time
		}{{"old", host.StateClosed, t0.Add(time.Hour)}, {"recent", host.StateClosed, t0.Add(3 * time.Hour)}, {"open", host.StateOpen, t0.Add(time.Hour)}} {
			c, _ := s.Info(ctx, alice, x.id)
			c.State, c.UpdatedAt = x.state, x.at
			turn := &host.Turn{RunID: "r-" + x.id, Kind: "message", Outcome: host.TurnAnswered, Started: x.at, Ended: x.at,
				Usage: &host.UsageRecord{Tenant: alice.Tenant, Principal: alice.Principal, Conversation: x.id, RunID: "r-" + x.id, Kind: "message", Provider: "p", Outcome: host.TurnAnswered, Started: x.at, Ended: x.at}}
			if _, err := s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: "hi"}}, Turn: turn}); err != nil {
				t.Fatal(err)
			}
		}
		swept, err := s.SweepClosed(ctx, t0.Add(2*time.Hour), 10)
		if err != nil || len(swept) != 1 || swept[0] != (host.Swept{Owner: alice, ID: "old"}) {
			t.Fatalf("swept %+v, %v; want the one closed before the cut-off, named with its owner", swept, err)
		}
		if _, err := s.Info(ctx, alice, "old"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("the swept conversation: %v", err)
		}
		for _, id := range []string{"recent", "open"} {
			if c, err := s.Load(ctx, alice, id); err != nil || len(c.Transcript) != 1 {
				t.Fatalf("%s after the sweep: %v %v", id, c.Transcript, err)
			}
		}
		us, err := s.UsageRecords(ctx, host.UsageQuery{Tenant: alice.Tenant})
		if err != nil || len(us) != 3 {
			t.Fatalf("usage after the sweep: %d records, %v; the swept conversation's record must stay", len(us), err)
		}
		rules, err := s.Rules(ctx, alice)
		var scopes []string
		for _, r := range rules {
			scopes = append(scopes, cmp.Or(r.Conversation, "everywhere"))
		}
		if err != nil || strings.Join(scopes, " ") != "recent open everywhere" {
			t.Fatalf("rules after the sweep: %v, %v; want the swept conversation's rule gone and the others kept", scopes, err)
		}
		if n, err := s.SweepClosed(ctx, t0.Add(2*time.Hour), 10); err != nil || len(n) != 0 {
			t.Fatalf("a second sweep: %+v %v", n, err)
		}
	}},
	{"a tenant's admins read every principal's, and no other tenant's", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		carol := tool.Identity{Tenant: "globex", Principal: "alice"} // alice's name, another tenant
		for i, c := range []host.Conversation{conv("a0", alice), conv("b0", bob), conv("a1", alice), conv("g0", carol)} {
			c.CreatedAt = t0.Add(time.Duration(i) * time.Minute)
			c.UpdatedAt = c.CreatedAt
			if err := s.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		closed, _ := s.Info(ctx, bob, "b0")
		closed.State = host.StateClosed
		if _, err := s.Save(ctx, host.Update{Conversation: closed}); err != nil {
			t.Fatal(err)
		}
		acme, err := s.ListTenant(ctx, "acme", host.ListOptions{})
		if err != nil || strings.Join(ids(acme), " ") != "a1 b0 a0" {
			t.Fatalf("acme: %v %v", ids(acme), err)
		}
		if acme[1].Owner != bob || acme[0].Owner != alice || acme[0].Transcript != nil {
			t.Fatalf("acme's owners: %+v", acme)
		}
		open, _ := s.ListTenant(ctx, "acme", host.ListOptions{OpenOnly: true, Limit: 1})
		if strings.Join(ids(open), " ") != "a1" {
			t.Fatalf("acme's open, one: %v", ids(open))
		}
		if g, _ := s.ListTenant(ctx, "globex", host.ListOptions{}); strings.Join(ids(g), " ") != "g0" {
			t.Fatalf("globex: %v", ids(g))
		}
		if none, err := s.ListTenant(ctx, "initech", host.ListOptions{}); err != nil || len(none) != 0 {
			t.Fatalf("a tenant with none: %v %v", ids(none), err)
		}
		c, err := s.TenantInfo(ctx, "acme", "b0")
		if err != nil || c.Owner != bob || c.State != host.StateClosed {
			t.Fatalf("acme's b0: %+v %v", c, err)
		}
		for _, q := range [][2]string{{"globex", "a0"}, {"acme", "g0"}, {"acme", "missing"}} {
			if _, err := s.TenantInfo(ctx, q[0], q[1]); !errors.Is(err, host.ErrNotFound) {
				t.Fatalf("%s's %s: %v, want not found", q[0], q[1], err)
			}
		}
	}},
	{"survives a reopen", func(t *testing.T, s host.Store, dsn string) {
		ctx := context.Background()
		c := conv("c", alice)
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		c.Turns = 1
		if _, err := s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: "kept"}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("a second close: %v", err)
		}
		s2 := openStore(t, dsn)
		defer s2.Close()
		got, err := s2.Load(ctx, alice, "c")
		if err != nil || len(got.Transcript) != 1 || got.Transcript[0].Content != "kept" || got.Version != 1 {
			t.Fatalf("after reopen: %+v %v", got, err)
		}
	}},
	{"concurrent saves: exactly one wins each version", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, conflicts := 0, 0
		for i := range 8 {
			wg.Go(func() {
				c := conv("c", alice)
				c.Turns = i + 1
				_, err := s.Save(ctx, host.Update{Conversation: c, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, host.ErrConflict):
					conflicts++
				default:
					t.Errorf("save: %v", err)
				}
			})
		}
		wg.Wait()
		if wins != 1 || conflicts != 7 {
			t.Fatalf("%d wins, %d conflicts", wins, conflicts)
		}
		ts, _ := s.Turns(ctx, alice, "c")
		if len(ts) != 1 {
			t.Fatalf("%d turn records for one winning save", len(ts))
		}
	}},
	{"a load while turns are saved reads one version whole", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("r", alice)); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c := conv("r", alice)
			for i := range 60 {
				v, err := s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: fmt.Sprint("q", i)}, {Role: "assistant", Content: fmt.Sprint("a", i)}},
					Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}})
				if err != nil {
					t.Errorf("save %d: %v", i, err)
					return
				}
				c.Version, c.Messages, c.Turns = v, c.Messages+2, c.Turns+1
			}
		}()
		loads, bad := 0, ""
	reading:
		for ; bad == ""; loads++ {
			select {
			case <-done:
				break reading
			default:
			}
			c, err := s.Load(ctx, alice, "r")
			switch {
			case err != nil:
				bad = fmt.Sprintf("a load during saves: %v", err)
			case len(c.Transcript) != c.Messages || c.Messages != 2*int(c.Version):
				bad = fmt.Sprintf("version %d: %d messages counted, %d read", c.Version, c.Messages, len(c.Transcript))
			}
		}
		<-done
		if bad != "" {
			t.Fatal(bad)
		}
		if loads == 0 {
			t.Fatal("no load ran alongside the saves")
		}
	}},
	{"many conversations saved at once all land (group commit)", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		const n = 60
		for i := range n {
			if err := s.Create(ctx, conv(fmt.Sprintf("g%d", i), alice)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				c := conv(fmt.Sprintf("g%d", i), alice)
				c.Turns = 1
				if v, err := s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: fmt.Sprint(i)}}, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}}); err != nil || v != 1 {
					t.Errorf("save %d: %d %v", i, v, err)
				}
			})
		}
		wg.Wait()
		for i := range n {
			got, err := s.Load(ctx, alice, fmt.Sprintf("g%d", i))
			if err != nil || got.Version != 1 || got.Transcript[0].Content != fmt.Sprint(i) {
				t.Fatalf("g%d: %+v %v", i, got, err)
			}
		}
		// A save whose context has ended is refused, and writes nothing.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		c := conv("g0", alice)
		c.Version = 1
		if _, err := s.Save(cctx, host.Update{Conversation: c}); err == nil {
			t.Fatal("a save with an ended context")
		}
		if got, _ := s.Info(ctx, alice, "g0"); got.Version != 1 {
			t.Fatalf("the refused save wrote: version %d", got.Version)
		}
	}},
	{"ping and close", func(t *testing.T, s host.Store, _ string) {
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.Close()
		err := s.Ping(context.Background())
		var se *sqlstore.Error
		if !errors.As(err, &se) {
			t.Fatalf("ping after close: %v", err)
		}
	}},
}

func ids(cs []host.Conversation) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// A store written by a newer release is refused, naming the fix.
func TestStoreRefusesNewerSchema(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			dsn := sk.dsn(t)
			s := openStore(t, dsn)
			s.Close()
			driver := "sqlite"
			if sk.name == "postgres" {
				driver = "pgx"
			}
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`UPDATE agentry_meta SET value = '99' WHERE key = 'schema'`); err != nil {
				t.Fatal(err)
			}
			db.Close()
			_, err = openStoreErr(dsn)
			if err == nil || !strings.Contains(err.Error(), "schema version 99") {
				t.Fatalf("a newer schema: %v", err)
			}
		})
	}
}

func openStoreErr(dsn string) (*sqlstore.Store, error) {
	if strings.HasPrefix(dsn, "postgres://") {
		return postgres.Open(context.Background(), dsn)
	}
	return sqlite.Open(context.Background(), dsn)
}

func TestOpenStoreRefusesBadDSNs(t *testing.T) {
	for _, dsn := range []string{"", "agentry.db?sync=sometimes", "a#b.db"} {
		if s, err := sqlite.Open(context.Background(), dsn); err == nil {
			s.Close()
			t.Fatalf("opened %q", dsn)
		}
	}
	if _, err := postgres.Open(context.Background(), "agentry.db"); err == nil {
		t.Fatal("postgres opened a file path")
	}
	// A password in a PostgreSQL DSN never reaches the error.
	_, err := postgres.Open(context.Background(), "postgres://agentry:hunter2secret@127.0.0.1:1/none?connect_timeout=1")
	if err == nil || strings.Contains(err.Error(), "hunter2secret") {
		t.Fatalf("unreachable postgres: %v", err)
	}
}
