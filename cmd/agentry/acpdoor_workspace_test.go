package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentry-dev/agentry/tool"
)

// TestConversationWorkspaceGoesWithItsConversation: closing a
// conversation removes its workspace and its agent's HOME beside it, and
// no other's; a conversation that took a pooled agent (its directory a
// link to the pool workspace) loses the pool workspace and its HOME too.
func TestConversationWorkspaceGoesWithItsConversation(t *testing.T) {
	root := t.TempDir()
	mk, drop := conversationDir(root), dropConversationDir(root)
	alice := tool.Identity{Tenant: "acme", Principal: "alice"}
	bob := tool.Identity{Tenant: "acme", Principal: "bob"}
	a, err := mk(alice, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := mk(bob, "ses_1")
	if err != nil || a == b {
		t.Fatalf("bob's workspace %q (%v), alice's %q", b, err, a)
	}
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{a + ".home", b + ".home"} {
		if err := os.MkdirAll(filepath.Join(h, ".claude"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := drop(alice, "ses_1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{a, a + ".home"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("alice's closed %s is still there: %v", p, err)
		}
	}
	for _, p := range []string{b, b + ".home"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("closing alice's conversation took bob's %s: %v", p, err)
		}
	}

	pooled, err := mk(alice, "ses_2")
	if err != nil {
		t.Fatal(err)
	}
	slot := filepath.Join(root, "pool-abc")
	for _, d := range []string{slot, slot + ".home"} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(pooled); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(slot, pooled); err != nil {
		t.Fatal(err)
	}
	if err := drop(alice, "ses_2"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pooled, slot, slot + ".home"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("closing the pooled conversation left %s: %v", p, err)
		}
	}
}
