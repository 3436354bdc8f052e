package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

// On PostgreSQL the agent's record of a turn the host saves goes in the
// host's save, one commit for both: until that save it is not in the
// database (another replica reads the turn before it); after it, it is;
// a pause stored or given up, or a save no host save follows, lands on
// its own at once; and what still waits at Close is written then.
func TestNativeRecordRidesWithTheHostSave(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other, err := postgres.Open(ctx, dsn) // what another replica reads
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	stored := func(b string) int {
		t.Helper()
		r, err := other.NativeStore().Load(ctx, provider.Binding(b))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Conversation.Messages)
	}
	msg := func(text string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: text} }
	ns := st.NativeStore()
	turn := host.WithSavesAfter(ctx)

	rec := native.Record{Conversation: agent.Conversation{Messages: []llm.Message{msg("one")}}}
	if err := ns.Save(turn, "b-1", rec); err != nil { // nothing known of it yet: at once
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 1 {
		t.Fatalf("the first save: %d messages stored", n)
	}
	rec.Conversation.Messages = append(rec.Conversation.Messages, msg("two"), msg("three"))
	if err := ns.Save(turn, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 1 {
		t.Fatalf("before the host's save: %d messages stored, want the 1 of before", n)
	}
	if r, err := ns.Load(ctx, "b-1"); err != nil || len(r.Conversation.Messages) != 3 {
		t.Fatalf("this replica reads what waits: %d %v", len(r.Conversation.Messages), err)
	}
	now := time.Now().UTC()
	c := host.Conversation{ID: "c-1", Owner: alice, State: host.StateOpen, Provider: native.DefaultKey, Binding: "b-1", CreatedAt: now, UpdatedAt: now}
	if err := st.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Save(ctx, host.Update{Conversation: c, Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}}); err != nil {
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 3 {
		t.Fatalf("after the host's save: %d messages stored", n)
	}

	// A pause stored: at once, turn context or not.
	rec.Pending = &native.PendingTurn{TurnID: "t2", Question: "deploy?", Checkpoint: agent.Checkpoint{ID: "cp"}}
	rec.Conversation.Messages = append(rec.Conversation.Messages, msg("four"))
	if err := ns.Save(turn, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 4 {
		t.Fatalf("a pause: %d messages stored", n)
	}
	// A save without a turn context (a durable activity's): at once.
	rec.Conversation.Messages = append(rec.Conversation.Messages, msg("five"))
	if err := ns.Save(ctx, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 5 {
		t.Fatalf("a save no host save follows: %d messages stored", n)
	}
	// One that waits when the store closes is written then.
	rec.Conversation.Messages = append(rec.Conversation.Messages, msg("six"))
	if err := ns.Save(turn, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 5 {
		t.Fatalf("before Close: %d messages stored", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := stored("b-1"); n != 6 {
		t.Fatalf("after Close: %d messages stored", n)
	}
}
