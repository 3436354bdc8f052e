package host_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

// The store's fences, on every store: the cases join TestStore's.
func init() {
	storeCases = append(storeCases, fenceCases...)
}

var fenceCases = []struct {
	name string
	run  func(t *testing.T, s host.Store, dsn string)
}{
	{"a write under an older lease epoch is refused", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		c := conv("e1", alice)
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		save := func(c host.Conversation, epoch int64, msg string) (int64, error) {
			return s.Save(ctx, host.Update{Conversation: c, Epoch: epoch, Append: []host.Message{{Role: "user", Content: msg}},
				Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}})
		}
		v, err := save(c, 5, "under 5")
		if err != nil {
			t.Fatal(err)
		}
		c.Version, c.Messages = v, 1
		// The holder of epoch 3 lost the conversation to the holder of 5:
		// it can neither append to the transcript nor move it on.
		if _, err := save(c, 3, "under 3"); !errors.Is(err, host.ErrFenced) {
			t.Fatalf("a save under an older epoch: %v", err)
		}
		if err := s.BeginTurn(ctx, alice, "e1", 3, host.Begun{RunID: "run-3", Kind: "message", Started: t0}); !errors.Is(err, host.ErrFenced) {
			t.Fatalf("a turn begun under an older epoch: %v", err)
		}
		got, err := s.Load(ctx, alice, "e1")
		if err != nil || got.Version != v || len(got.Transcript) != 1 || got.Transcript[0].Content != "under 5" || got.Epoch != 5 || got.Begun != nil {
			t.Fatalf("after the refused writes: %+v %v", got, err)
		}
		if ts, _ := s.Turns(ctx, alice, "e1"); len(ts) != 1 {
			t.Fatalf("the turn log after the refused writes: %+v", ts)
		}
		// The same epoch goes on; a newer one takes over from it.
		if v, err = save(c, 5, "again under 5"); err != nil {
			t.Fatal(err)
		}
		c.Version, c.Messages = v, 2
		if _, err = save(c, 9, "under 9"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Info(ctx, alice, "e1"); got.Epoch != 9 || got.Messages != 3 {
			t.Fatalf("after a newer epoch wrote: %+v", got)
		}
		// A stale version under the right epoch is still a conflict.
		if _, err := save(c, 9, "stale"); !errors.Is(err, host.ErrConflict) {
			t.Fatalf("a stale version: %v", err)
		}
	}},
	{"a turn begun shows until the save of its end", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		c := conv("b1", alice)
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		b := host.Begun{RunID: "run-1", Kind: "message", Input: "print(1)", Started: t0}
		if err := s.BeginTurn(ctx, alice, "b1", 2, b); err != nil {
			t.Fatal(err)
		}
		if err := s.BeginTurn(ctx, bob, "b1", 2, b); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner begins a turn: %v", err)
		}
		got, err := s.Info(ctx, alice, "b1")
		if err != nil || got.Begun == nil || *got.Begun != b || got.Epoch != 2 || got.Version != 0 {
			t.Fatalf("a turn in flight: %+v %v", got, err)
		}
		// Taken back when it did not start after all.
		if err := s.BeginTurn(ctx, alice, "b1", 2, host.Begun{}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Info(ctx, alice, "b1"); got.Begun != nil {
			t.Fatalf("a turn taken back: %+v", got.Begun)
		}
		if err := s.BeginTurn(ctx, alice, "b1", 2, b); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Save(ctx, host.Update{Conversation: c, Epoch: 2, Turn: &host.Turn{RunID: "run-1", Kind: "message", Outcome: host.TurnAnswered}}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Info(ctx, alice, "b1"); got.Begun != nil {
			t.Fatalf("after the turn's save: %+v", got.Begun)
		}
	}},
	{"a forwarded request either begins or is given up, never both", func(t *testing.T, s host.Store, _ string) {
		ctx := context.Background()
		if err := s.Create(ctx, conv("f1", alice)); err != nil {
			t.Fatal(err)
		}
		fwd := func(i int) string { return fmt.Sprintf("fwd-%032x", i) }
		// Given up first: it never begins.
		if began, err := s.VoidForward(ctx, alice, "f1", fwd(1)); err != nil || began {
			t.Fatalf("giving up a request that had not begun: %v %v", began, err)
		}
		if err := s.BeginTurn(ctx, alice, "f1", 1, host.Begun{RunID: "run-1", Kind: "message", Forward: fwd(1), Started: t0}); !errors.Is(err, host.ErrForwardVoided) {
			t.Fatalf("beginning a request given up: %v", err)
		}
		// Begun first: it cannot be given up (its forwarder must not tell
		// its caller to send it again).
		if err := s.BeginTurn(ctx, alice, "f1", 1, host.Begun{RunID: "run-2", Kind: "message", Forward: fwd(2), Started: t0}); err != nil {
			t.Fatal(err)
		}
		if began, err := s.VoidForward(ctx, alice, "f1", fwd(2)); err != nil || !began {
			t.Fatalf("giving up a request that began: %v %v", began, err)
		}
		// Many more come and go; the log stays bounded and recent ones hold.
		for i := 3; i < 200; i++ {
			if i%2 == 0 {
				if err := s.BeginTurn(ctx, alice, "f1", 1, host.Begun{RunID: "run", Kind: "message", Forward: fwd(i), Started: t0}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := s.VoidForward(ctx, alice, "f1", fwd(i)); err != nil {
				t.Fatal(err)
			}
		}
		if began, err := s.VoidForward(ctx, alice, "f1", fwd(198)); err != nil || !began {
			t.Fatalf("a recent begun request: %v %v", began, err)
		}
		if err := s.BeginTurn(ctx, alice, "f1", 1, host.Begun{RunID: "run", Kind: "message", Forward: fwd(199), Started: t0}); !errors.Is(err, host.ErrForwardVoided) {
			t.Fatalf("a recent request given up: %v", err)
		}
		if _, err := s.VoidForward(ctx, bob, "f1", fwd(500)); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("another owner gives up a request: %v", err)
		}
		if _, err := s.VoidForward(ctx, alice, "f1", "fwd-%"); err == nil {
			t.Fatal("an id LIKE reads as a pattern was taken")
		}
	}},
	{"providers' records", func(t *testing.T, s host.Store, _ string) {
		rs, ok := s.(host.Records)
		if !ok {
			t.Skip("this store keeps no providers' records")
		}
		ctx := context.Background()
		if _, err := rs.LoadRecord(ctx, "b-1"); !errors.Is(err, host.ErrNoRecord) {
			t.Fatalf("nothing stored: %v", err)
		}
		entries := []string{`"one"`, `"two"`, `"three"`, `"four"`}
		rec := func(n int, head string, marks ...host.RecordMark) host.RecordWrite {
			return host.RecordWrite{Binding: "b-1", Record: host.Record{Head: []byte(head), Entries: n, Marks: marks,
				Entry: func(i int) ([]byte, error) { return []byte(entries[i]), nil }}}
		}
		check := func(n int, head string, marks int) {
			t.Helper()
			got, err := rs.LoadRecord(ctx, "b-1")
			if err != nil || string(got.Head) != head || len(got.Entries) != n || len(got.Marks) != marks {
				t.Fatalf("stored: %q %d entries %v marks, %v; want %q %d %d", got.Head, len(got.Entries), got.Marks, err, head, n, marks)
			}
			for i, e := range got.Entries {
				if string(e) != entries[i] {
					t.Fatalf("entry %d: %s", i, e)
				}
			}
		}
		if err := rs.SaveRecord(ctx, rec(2, "h1", host.RecordMark{TurnID: "t1", Entries: 2})); err != nil {
			t.Fatal(err)
		}
		check(2, "h1", 1)
		// It grows: only what it gained is written.
		if err := rs.SaveRecord(ctx, rec(4, "h2", host.RecordMark{TurnID: "t1", Entries: 2}, host.RecordMark{TurnID: "t2", Entries: 4})); err != nil {
			t.Fatal(err)
		}
		check(4, "h2", 2)
		if ok, err := rs.Marked(ctx, "b-1", "t2"); err != nil || !ok {
			t.Fatalf("marked t2: %v %v", ok, err)
		}
		if ok, err := rs.Marked(ctx, "b-1", "t3"); err != nil || ok {
			t.Fatalf("marked t3: %v %v", ok, err)
		}
		// Fewer replace them.
		if err := rs.SaveRecord(ctx, rec(1, "h3")); err != nil {
			t.Fatal(err)
		}
		check(1, "h3", 0)
		// Dropped, it is gone, and written again from nothing.
		if rd, ok := s.(host.RecordDropper); ok {
			if err := rd.DropRecord(ctx, "b-1"); err != nil {
				t.Fatal(err)
			}
			if _, err := rs.LoadRecord(ctx, "b-1"); !errors.Is(err, host.ErrNoRecord) {
				t.Fatalf("a dropped record: %v", err)
			}
			if err := rd.DropRecord(ctx, "b-1"); err != nil {
				t.Fatalf("dropping it again: %v", err)
			}
			if err := rs.SaveRecord(ctx, rec(1, "h3")); err != nil {
				t.Fatal(err)
			}
			check(1, "h3", 0)
		}

		// With a conversation's save, in its transaction: written when the
		// save is, not when it is refused.
		c := conv("r1", alice)
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		stale := c
		stale.Version = 7
		if _, err := s.Save(ctx, host.Update{Conversation: stale, Records: []host.RecordWrite{rec(3, "refused")}}); !errors.Is(err, host.ErrConflict) {
			t.Fatalf("a stale save: %v", err)
		}
		check(1, "h3", 0)
		if _, err := s.Save(ctx, host.Update{Conversation: c, Epoch: 4, Records: []host.RecordWrite{rec(3, "with the save", host.RecordMark{TurnID: "t9", Entries: 3})}}); err != nil {
			t.Fatal(err)
		}
		check(3, "with the save", 1)
		// One fenced to the conversation is refused under an older epoch.
		w := rec(4, "fenced")
		w.Fence = &host.Fence{Owner: alice, Conversation: "r1", Epoch: 3}
		if err := rs.SaveRecord(ctx, w); !errors.Is(err, host.ErrFenced) {
			t.Fatalf("a record written under an older epoch: %v", err)
		}
		check(3, "with the save", 1)
		w.Fence.Epoch = 4
		if err := rs.SaveRecord(ctx, w); err != nil {
			t.Fatal(err)
		}
		check(4, "fenced", 0)
		if err := rs.SaveRecord(ctx, host.RecordWrite{Binding: "b-2", Record: host.Record{Entries: 1}}); err == nil {
			t.Fatal("a record with entries and no way to encode them was taken")
		}
	}},
}

// A record written in a turn the host runs waits for the host's save of
// the turn and goes in it; one that stores or gives up a pause is written
// at once, as is one outside a turn.
func TestRecordsJoinTheTurnsSave(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := sk.dsn(t)
			s := openStore(t, dsn)
			defer s.Close()
			other := openStore(t, dsn) // what another process reads
			defer other.Close()
			stored := func() int {
				t.Helper()
				r, err := other.LoadRecord(ctx, "b-1")
				if err != nil {
					t.Fatal(err)
				}
				return len(r.Entries)
			}
			c := conv("j1", alice)
			if err := s.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			write := func(ctx context.Context, n int, later bool) {
				t.Helper()
				w := host.RecordWrite{Binding: provider.Binding("b-1"), Record: host.Record{Head: []byte("{}"), Entries: n,
					Entry: func(i int) ([]byte, error) { return []byte(fmt.Sprint(i)), nil }}}
				if err := host.SaveRecord(ctx, s, w, later); err != nil {
					t.Fatal(err)
				}
			}
			write(ctx, 1, true) // outside a turn: at once
			if n := stored(); n != 1 {
				t.Fatalf("outside a turn: %d entries stored", n)
			}
			turn, take := host.TurnContext(ctx, s)
			write(turn, 3, true)
			if n := stored(); n != 1 {
				t.Fatalf("in a turn, before the host's save: %d entries stored", n)
			}
			write(turn, 4, false) // a pause: at once
			if n := stored(); n != 4 {
				t.Fatalf("in a turn, a write that cannot wait: %d entries stored", n)
			}
			write(turn, 5, true)
			recs := take()
			if len(recs) != 1 || recs[0].Record.Entries != 5 {
				t.Fatalf("what waits for the save: %+v", recs)
			}
			c.UpdatedAt = t0.Add(time.Second)
			if _, err := s.Save(ctx, host.Update{Conversation: c, Records: recs}); err != nil {
				t.Fatal(err)
			}
			if n := stored(); n != 5 {
				t.Fatalf("after the host's save: %d entries stored", n)
			}
		})
	}
}

// The native agent's records in a turn the host runs: one that stores a
// pause, or gives one up, is in the database when Save returns (a turn
// whose pause was answered goes on only once the answer is stored, so a
// process that dies meanwhile cannot bring the pause back to be
// answered, and run, twice); the others wait for the host's save.
func TestNativePauseChangesLandBeforeSaveReturns(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, sk.dsn(t))
			defer s.Close()
			stored := func() (pending bool, messages int) {
				t.Helper()
				r, err := s.LoadRecord(ctx, "b-p")
				if err != nil {
					t.Fatal(err)
				}
				return strings.Contains(string(r.Head), `"pending"`), len(r.Entries)
			}
			ns := native.HostStore(s)
			turn, take := host.TurnContext(ctx, s)
			rec := native.Record{Conversation: agent.Conversation{Messages: []llm.Message{{Role: llm.RoleUser, Content: "deploy"}}}}
			if err := ns.Save(turn, "b-p", rec); err != nil { // nothing known of it yet: at once
				t.Fatal(err)
			}
			if p, n := stored(); p || n != 1 {
				t.Fatalf("after the first save: pending %v, %d messages", p, n)
			}
			rec.Conversation.Messages = append(rec.Conversation.Messages, llm.Message{Role: llm.RoleAssistant, Content: "sure"})
			if err := ns.Save(turn, "b-p", rec); err != nil {
				t.Fatal(err)
			}
			if _, n := stored(); n != 1 {
				t.Fatalf("a save that waits for the host's: %d messages stored", n)
			}
			rec.Pending = &native.PendingTurn{TurnID: "t1", Question: "deploy?", Checkpoint: agent.Checkpoint{ID: "cp-1"}}
			if err := ns.Save(turn, "b-p", rec); err != nil {
				t.Fatal(err)
			}
			if p, n := stored(); !p || n != 2 {
				t.Fatalf("the pause was not stored when Save returned: pending %v, %d messages", p, n)
			}
			rec.Pending = nil
			if err := ns.Save(turn, "b-p", rec); err != nil {
				t.Fatal(err)
			}
			if p, _ := stored(); p {
				t.Fatal("the answered pause was still stored when Save returned")
			}
			if left := take(); len(left) != 0 {
				t.Fatalf("records still waiting after ones written whole: %d", len(left))
			}
		})
	}
}
