package native_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// A conversation kept in the host's store: a record round-trips whole
// (identity, tool calls, a pause); it grows by appending; a shorter one
// replaces what was stored; it survives a reopen.
func TestHostStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentry.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ns := native.HostStore(s)
	if _, err := ns.Load(ctx, "b-1"); !errors.Is(err, native.ErrNotStored) {
		t.Fatalf("an unknown binding: %v", err)
	}
	id := &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "ses_a"}
	msg := func(role llm.Role, text string) llm.Message { return llm.Message{Role: role, Content: text} }
	rec := native.Record{Conversation: agent.Conversation{Version: agent.ConversationVersion, Identity: id,
		Messages: []llm.Message{msg(llm.RoleUser, "one"), msg(llm.RoleAssistant, "two")}}, Turns: []native.TurnMark{{ID: "t1", Messages: 2}}}
	if err := ns.Save(ctx, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	rec.Conversation.Messages = append(rec.Conversation.Messages, msg(llm.RoleUser, "three"), llm.Message{Role: llm.RoleAssistant,
		ToolCalls: []llm.ToolCall{{ID: "c1", Name: "run_code", Args: []byte(`{"code":"1"}`)}}})
	rec.Turns = append(rec.Turns, native.TurnMark{ID: "t2", Messages: 4})
	rec.Pending = &native.PendingTurn{TurnID: "t3", Question: "deploy?", Checkpoint: agent.Checkpoint{ID: "cp-1"}}
	if err := ns.Save(ctx, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	got, err := ns.Load(ctx, "b-1")
	if err != nil || len(got.Conversation.Messages) != 4 || got.Conversation.Messages[2].Content != "three" ||
		string(got.Conversation.Messages[3].ToolCalls[0].Args) != `{"code":"1"}` || len(got.Turns) != 2 || got.Turns[1] != rec.Turns[1] ||
		!got.Conversation.Identity.Equal(id) || got.Pending == nil || got.Pending.Checkpoint.ID != "cp-1" {
		t.Fatalf("load after growing: %+v %v", got, err)
	}
	short := rec
	short.Conversation.Messages = rec.Conversation.Messages[:1]
	short.Turns, short.Pending = nil, nil
	if err := ns.Save(ctx, "b-2", short); err != nil {
		t.Fatal(err)
	}
	if err := ns.Save(ctx, "b-1", short); err != nil { // fewer messages: replaces
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, b := range []string{"b-1", "b-2"} {
		got, err := native.HostStore(s2).Load(ctx, provider.Binding(b))
		if err != nil || len(got.Conversation.Messages) != 1 || got.Conversation.Messages[0].Content != "one" || len(got.Turns) != 0 || got.Pending != nil {
			t.Fatalf("%s after a reopen: %+v %v", b, got, err)
		}
	}
}

// A turn writes the same few rows however long the conversation is: the
// stored head does not grow with the turns.
func TestHostStoreHeadStaysSmall(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentry.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns := native.HostStore(s)
	var rec native.Record
	heads := map[int]int{}
	for i := range 200 {
		rec.Conversation.Messages = append(rec.Conversation.Messages,
			llm.Message{Role: llm.RoleUser, Content: "q"}, llm.Message{Role: llm.RoleAssistant, Content: "a"})
		rec.Turns = append(rec.Turns, native.TurnMark{ID: fmt.Sprint("turn-", i), Messages: len(rec.Conversation.Messages)})
		if err := ns.Save(ctx, "b-long", rec); err != nil {
			t.Fatal(err)
		}
		if i == 0 || i == 199 {
			var n int
			if err := db.QueryRow(`SELECT length(head) FROM agentry_native WHERE binding = 'b-long'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			heads[i] = n
		}
	}
	if heads[0] != heads[199] {
		t.Fatalf("the head grew from %d to %d bytes over 200 turns", heads[0], heads[199])
	}
	got, err := ns.Load(ctx, "b-long")
	if err != nil || len(got.Turns) != 200 || got.Turns[199].Messages != 400 || len(got.Conversation.Messages) != 400 {
		t.Fatalf("after 200 turns: %d turns, %d messages, %v", len(got.Turns), len(got.Conversation.Messages), err)
	}
}
