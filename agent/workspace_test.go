package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// TestWorkspaceIsTheConversationsInterpreter: a file put in the workspace
// before any call is what the conversation's code sees; another
// conversation's workspace is another directory; closing the
// conversation takes the workspace with it.
func TestWorkspaceIsTheConversationsInterpreter(t *testing.T) {
	t.Parallel()
	r := local.New(local.Options{Dir: t.TempDir()})
	run := code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeSession, Language: "sh"})
	a, err := agent.New(agent.Options{Model: scripted.New(), Tools: []tool.Tool{tool.WithCheckIn(run)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	dir, err := a.Workspace(t.Context(), "conv-1", alice)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the person"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := a.Workspace(t.Context(), "conv-1", alice); err != nil || again != dir {
		t.Fatalf("the same conversation's workspace moved: %q → %q (%v)", dir, again, err)
	}
	bob, err := a.Workspace(t.Context(), "conv-1", &tool.Identity{Tenant: "acme", Principal: "bob"})
	if err != nil || bob == dir {
		t.Fatalf("bob's workspace %q (%v) is alice's %q", bob, err, dir)
	}
	if n := a.LiveToolSessions(); n != 2 {
		t.Fatalf("%d live tool sessions, want 2", n)
	}
	if a.CloseToolSessions(t.Context(), "conv-1") != 2 {
		t.Fatal("closing the conversation closed no interpreter")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace outlived its conversation: %v", err)
	}
}

func TestWorkspaceSeenByTheConversationsCode(t *testing.T) {
	t.Parallel()
	r := local.New(local.Options{Dir: t.TempDir()})
	run := code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeSession, Language: "sh"})
	m := scripted.New(calls(call("run_code", `{"code":"cat in.txt > out.txt"}`)), answer("done"))
	a, err := agent.New(agent.Options{Model: m, Tools: []tool.Tool{run}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	dir, err := a.Workspace(t.Context(), "conv-1", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the person"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(t.Context(), agent.Input{Message: "go", SessionID: "conv-1", Identity: id}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "from the person" {
		t.Fatalf("the conversation's code did not see the file put in its workspace: %q, %v", b, err)
	}
}

func TestWorkspaceRefusedWithoutAToolThatKeepsOne(t *testing.T) {
	t.Parallel()
	r := local.New(local.Options{Dir: t.TempDir()})
	for _, tools := range [][]tool.Tool{nil, {code.NewTool(r, code.ToolOptions{Language: "sh"})}} {
		a, err := agent.New(agent.Options{Model: scripted.New(), Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Workspace(t.Context(), "conv-1", &tool.Identity{Tenant: "t", Principal: "p"}); !errors.Is(err, tool.ErrNoWorkspace) {
			t.Fatalf("Workspace = %v, want ErrNoWorkspace", err)
		}
		_ = a.Shutdown(context.Background())
	}
}
