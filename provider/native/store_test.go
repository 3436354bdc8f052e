package native_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := native.NewMemoryStore(2)
	if _, err := m.Load(ctx, "none"); !errors.Is(err, native.ErrNotStored) {
		t.Fatalf("load of nothing: %v", err)
	}
	rec := native.Record{Conversation: agent.Conversation{Version: 1, Identity: &tool.Identity{Tenant: "t"},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, Turns: []native.TurnMark{{ID: "t1", Messages: 1}}}
	if err := m.Save(ctx, "a", rec); err != nil {
		t.Fatal(err)
	}
	// What was saved and what was loaded are copies.
	rec.Conversation.Messages[0].Content = "changed"
	rec.Conversation.Identity.Tenant = "changed"
	got, err := m.Load(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Conversation.Messages[0].Content != "hi" || got.Conversation.Identity.Tenant != "t" {
		t.Fatalf("the store kept the caller's changes: %+v", got)
	}
	got.Turns[0].ID = "changed"
	if again, _ := m.Load(ctx, "a"); again.Turns[0].ID != "t1" {
		t.Fatal("a loaded record aliases the stored one")
	}
	// The bound forgets the least recently saved.
	for i, b := range []provider.Binding{"b", "a", "c"} {
		if err := m.Save(ctx, b, native.Record{Turns: []native.TurnMark{{ID: fmt.Sprint(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 2 {
		t.Fatalf("%d held", m.Len())
	}
	if _, err := m.Load(ctx, "b"); !errors.Is(err, native.ErrNotStored) {
		t.Fatalf("the oldest was kept: %v", err)
	}
	for _, b := range []provider.Binding{"a", "c"} {
		if _, err := m.Load(ctx, b); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	if native.NewMemoryStore(0) == nil {
		t.Fatal("no default store")
	}
}
