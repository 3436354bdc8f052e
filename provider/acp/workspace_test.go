package acp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkspaceIsTheAgentsWorkingDirectory: what the host puts in the
// session's workspace is what the agent reads, and what the agent writes
// is there to take out.
func TestWorkspaceIsTheAgentsWorkingDirectory(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	if !s.HasWorkspace() {
		t.Fatal("an ACP session keeps no workspace")
	}
	dir, err := s.Workspace(context.Background())
	if err != nil || dir != r.ws {
		t.Fatalf("Workspace = %q, %v; want %q", dir, err, r.ws)
	}
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("from the person"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := said(turn(t, s, "t1", "read "+in)); !strings.Contains(got, "from the person") {
		t.Fatalf("the agent read %q", got)
	}
	out := filepath.Join(dir, "out.txt")
	if got := said(turn(t, s, "t2", "write "+out+" edited")); got != "wrote" {
		t.Fatalf("the agent's write: %q", got)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "edited" {
		t.Fatalf("out.txt = %q, %v", b, err)
	}
}
