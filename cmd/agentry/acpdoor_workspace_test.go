package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentry-dev/agentry/tool"
)

// TestConversationWorkspaceGoesWithItsConversation: closing a
// conversation removes its workspace and no other.
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
	if err := drop(alice, "ses_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("alice's closed workspace is still there: %v", err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("closing alice's conversation took bob's workspace: %v", err)
	}
}
