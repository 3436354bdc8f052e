package host_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/llm"
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
	alice = host.Owner{Tenant: "acme", Principal: "alice"}
	bob   = host.Owner{Tenant: "acme", Principal: "bob"}
	t0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func conv(id string, o host.Owner) host.Conversation {
	return host.Conversation{ID: id, Owner: o, State: host.StateOpen, CreatedAt: t0, UpdatedAt: t0}
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
		if err != nil || c.ID != "c1" || c.Owner != alice || c.State != host.StateOpen || c.Version != 0 || !c.CreatedAt.Equal(t0) || c.Transcript != nil {
			t.Fatalf("load: %+v %v", c, err)
		}
		if _, err := s.Load(ctx, bob, "c1"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner loads it: %v", err)
		}
		if _, err := s.Load(ctx, host.Owner{Tenant: "other", Principal: "alice"}, "c1"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("the same principal of another tenant loads it: %v", err)
		}
		if _, err := s.Load(ctx, alice, "nope"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("a missing id: %v", err)
		}
	}},
	{"refuses what makes no sense", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		for _, c := range []host.Conversation{
			{ID: "", Owner: alice, State: host.StateOpen},
			{ID: "x", Owner: host.Owner{Tenant: "acme"}, State: host.StateOpen},
			{ID: "x", Owner: alice, State: "weird"},
			{ID: "x", Owner: alice, State: host.StatePaused},
		} {
			if err := s.Create(ctx, c); err == nil {
				t.Fatalf("created %+v", c)
			}
		}
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		c := conv("c", alice)
		c.State, c.Pending = host.StatePaused, &host.Pending{Question: "q", Tool: "t"}
		if _, err := s.Save(ctx, host.Update{Conversation: c}); err == nil {
			t.Fatal("saved a pause without its checkpoint")
		}
	}},
	{"save is versioned and transactional", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		c := conv("c", alice)
		c.Turns, c.LastRunID, c.UpdatedAt = 1, "run-1", t0.Add(time.Second)
		c.Transcript = &agent.Conversation{Version: 1, Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}, {Role: llm.RoleAssistant, Content: "hello"}}}
		v, err := s.Save(ctx, host.Update{Conversation: c, Turn: &host.Turn{RunID: "run-1", Kind: "message", Outcome: host.TurnAnswered, Started: t0, Ended: t0}})
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
		if got.Turns != 1 || got.Version != 1 || got.LastRunID != "run-1" || len(got.Transcript.Messages) != 2 || got.Transcript.Messages[1].Content != "hello" {
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
		id := &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "c"}
		msgs := []llm.Message{{Role: llm.RoleUser, Content: "one"}, {Role: llm.RoleAssistant, Content: "two"}}
		c.Transcript = &agent.Conversation{Version: 1, Identity: id, Messages: msgs}
		v, err := s.Save(ctx, host.Update{Conversation: c})
		if err != nil {
			t.Fatal(err)
		}
		c.Version = v
		c.Transcript = &agent.Conversation{Version: 1, Identity: id, Messages: append(slices.Clone(msgs),
			llm.Message{Role: llm.RoleUser, Content: "three"}, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "x", Name: "t", Args: []byte(`{"a":1}`)}}})}
		if v, err = s.Save(ctx, host.Update{Conversation: c}); err != nil {
			t.Fatal(err)
		}
		c.Version = v
		got, err := s.Load(ctx, alice, "c")
		if err != nil || len(got.Transcript.Messages) != 4 || got.Transcript.Messages[2].Content != "three" ||
			string(got.Transcript.Messages[3].ToolCalls[0].Args) != `{"a":1}` || *got.Transcript.Identity != *id {
			t.Fatalf("load: %+v %v", got.Transcript, err)
		}
		// A save without a transcript keeps it; a shorter one is refused.
		c.Transcript = nil
		if v, err = s.Save(ctx, host.Update{Conversation: c}); err != nil {
			t.Fatal(err)
		}
		c.Version = v
		c.Transcript = &agent.Conversation{Version: 1, Messages: msgs[:1]}
		if _, err := s.Save(ctx, host.Update{Conversation: c}); !errors.Is(err, host.ErrConflict) {
			t.Fatalf("a shrinking transcript: %v", err)
		}
		got, _ = s.Load(ctx, alice, "c")
		if len(got.Transcript.Messages) != 4 {
			t.Fatalf("%d messages after a kept and a refused save", len(got.Transcript.Messages))
		}
		info, err := s.Info(ctx, alice, "c")
		if err != nil || info.Transcript != nil || info.Version != got.Version {
			t.Fatalf("info: %+v %v", info, err)
		}
		if _, err := s.Info(ctx, bob, "c"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner's info: %v", err)
		}
	}},
	{"checkpoint set and cleared", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("c", alice)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadCheckpoint(ctx, alice, "c"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("no checkpoint yet: %v", err)
		}
		c := conv("c", alice)
		c.State, c.Pending = host.StatePaused, &host.Pending{Question: "deploy?", Tool: "deploy"}
		cp := []byte(`{"version":1,"id":"cp-1"}`)
		if _, err := s.Save(ctx, host.Update{Conversation: c, Checkpoint: cp}); err != nil {
			t.Fatal(err)
		}
		got, err := s.LoadCheckpoint(ctx, alice, "c")
		if err != nil || string(got) != string(cp) {
			t.Fatalf("checkpoint: %s %v", got, err)
		}
		if _, err := s.LoadCheckpoint(ctx, bob, "c"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner's checkpoint: %v", err)
		}
		l, _ := s.Load(ctx, alice, "c")
		if l.State != host.StatePaused || l.Pending == nil || l.Pending.Question != "deploy?" || l.Pending.Tool != "deploy" {
			t.Fatalf("paused: %+v", l)
		}
		l.State, l.Pending = host.StateOpen, nil
		if _, err := s.Save(ctx, host.Update{Conversation: l}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadCheckpoint(ctx, alice, "c"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("a cleared checkpoint: %v", err)
		}
	}},
	{"list and count by owner", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		for i := range 5 {
			c := conv(fmt.Sprintf("a%d", i), alice)
			c.UpdatedAt = t0.Add(time.Duration(i) * time.Minute)
			if err := s.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Create(ctx, conv("b0", bob)); err != nil {
			t.Fatal(err)
		}
		closed, _ := s.Load(ctx, alice, "a1")
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
	{"survives a reopen", func(t *testing.T, s host.Store, dsn string) {
		ctx := context.Background()
		c := conv("c", alice)
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		c.Transcript = &agent.Conversation{Version: 1, Messages: []llm.Message{{Role: llm.RoleUser, Content: "kept"}}}
		c.Turns = 1
		if _, err := s.Save(ctx, host.Update{Conversation: c}); err != nil {
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
		if err != nil || got.Transcript == nil || got.Transcript.Messages[0].Content != "kept" || got.Version != 1 {
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
				c.Transcript = &agent.Conversation{Version: 1, Messages: []llm.Message{{Role: llm.RoleUser, Content: fmt.Sprint(i)}}}
				if v, err := s.Save(ctx, host.Update{Conversation: c, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}}); err != nil || v != 1 {
					t.Errorf("save %d: %d %v", i, v, err)
				}
			})
		}
		wg.Wait()
		for i := range n {
			got, err := s.Load(ctx, alice, fmt.Sprintf("g%d", i))
			if err != nil || got.Version != 1 || got.Transcript.Messages[0].Content != fmt.Sprint(i) {
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
		var se *host.StoreError
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
			_, err = host.OpenStore(context.Background(), dsn)
			if err == nil || !strings.Contains(err.Error(), "schema version 99") {
				t.Fatalf("a newer schema: %v", err)
			}
		})
	}
}

func TestOpenStoreRefusesBadDSNs(t *testing.T) {
	for _, dsn := range []string{"", "agentry.db?sync=sometimes", "a#b.db"} {
		if s, err := host.OpenStore(context.Background(), dsn); err == nil {
			s.Close()
			t.Fatalf("opened %q", dsn)
		}
	}
	// A password in a PostgreSQL DSN never reaches the error.
	_, err := host.OpenStore(context.Background(), "postgres://agentry:hunter2secret@127.0.0.1:1/none?connect_timeout=1")
	if err == nil || strings.Contains(err.Error(), "hunter2secret") {
		t.Fatalf("unreachable postgres: %v", err)
	}
}
