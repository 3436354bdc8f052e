package acp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// open opens a registry with one instance of cfg on r's driver; the
// caller disposes it (a restart of the host is a dispose, then a new
// registry).
func (r *rig) open(cfg json.RawMessage) (*provider.Registry, *provider.Instance) {
	r.t.Helper()
	reg, err := provider.OpenRegistry(context.Background(), []provider.Driver{r.driver},
		[]provider.Definition{{ID: "agent", Provider: acp.DefaultKey, Config: cfg}})
	if err != nil {
		r.t.Fatal(err)
	}
	inst, err := reg.Instance("agent")
	if err != nil {
		r.t.Fatal(err)
	}
	return reg, inst
}

func dispose(t *testing.T, reg *provider.Registry) {
	t.Helper()
	if err := reg.Dispose(context.Background()); err != nil {
		t.Fatalf("dispose: %v", err)
	}
}

// An agent that keeps its sessions in its HOME (as Claude Code does under
// ~/.claude) loads its session after the instance is disposed and opened
// again (a restart of the host), and after an eviction, when the
// definition keeps HOMEs: the HOME is <workspace>.home and outlives the
// process. Without keepHome its memory goes with its process, and the
// conversation goes on afresh.
func TestKeptHomeResumesAfterARestart(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{true, false} {
		t.Run(map[bool]string{true: "kept", false: "private"}[keep], func(t *testing.T) {
			t.Parallel()
			r := newRig(t, nil)
			cfg := r.config([]string{"ACP_SCRIPTED_STATE=home"}, func(c *acp.Config) { c.KeepHome = keep })
			reg, inst := r.open(cfg)
			s, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "c1", WorkingDirectory: r.ws})
			if err != nil {
				t.Fatal(err)
			}
			turn(t, s, "t1", "hello")
			turn(t, s, "t2", "hello")
			b := s.Binding()
			dispose(t, reg)

			_, err = os.Stat(filepath.Join(r.ws+".home", ".scripted", string(b)))
			if keep && err != nil {
				t.Fatalf("the agent's record of its session is not in its kept HOME: %v", err)
			}
			if !keep && !os.IsNotExist(err) {
				t.Fatalf("without keepHome a HOME was kept beside the workspace: %v", err)
			}

			reg, inst = r.open(cfg)
			defer dispose(t, reg)
			rs, err := inst.Adapter().Resume(context.Background(), provider.ResumeRequest{SessionID: "c1", WorkingDirectory: r.ws, Binding: b})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close(context.Background(), provider.CloseRequested)
			got := said(turn(t, rs, "t3", "turns"))
			afresh := len(r.events.of(acp.TypeSessionAfresh))
			switch {
			case keep && (got != "turns 3" || afresh != 0):
				t.Errorf("with a kept HOME, after the restart the agent says %q (%d session_afresh); want turns 3 and none", got, afresh)
			case !keep && (got != "turns 1" || afresh != 1):
				t.Errorf("with a private HOME, after the restart the agent says %q (%d session_afresh); want turns 1 of a new session, afresh", got, afresh)
			}
			if !keep {
				return
			}
			// An eviction stops the agent too; the next one loads the
			// session from the same HOME.
			if err := rs.Close(context.Background(), provider.CloseEvicted); err != nil {
				t.Fatal(err)
			}
			again, err := inst.Adapter().Resume(context.Background(), provider.ResumeRequest{SessionID: "c1", WorkingDirectory: r.ws, Binding: b})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close(context.Background(), provider.CloseRequested)
			if got := said(turn(t, again, "t4", "turns")); got != "turns 4" || len(r.events.of(acp.TypeSessionAfresh)) != 0 {
				t.Errorf("after an eviction the agent says %q; want turns 4, not afresh", got)
			}
		})
	}
}

// A pooled agent's kept HOME lies beside its workspace and goes with it
// to the conversation that takes it: after a restart the conversation
// resumes with the agent's memory, and RemoveWorkspace removes the link,
// the pool workspace and its HOME.
func TestPooledAgentsHomeFollowsItsWorkspace(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	cfg := r.config([]string{"ACP_SCRIPTED_STATE=home"}, func(c *acp.Config) { c.KeepHome, c.Pool = true, 1 })
	reg, inst := r.open(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.events.await(ctx, acp.TypeAgentPooled, 1)
	conv := filepath.Join(r.root, "conversation")
	if err := os.Mkdir(conv, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "warm", WorkingDirectory: conv})
	if err != nil {
		t.Fatal(err)
	}
	turn(t, s, "t1", "hello")
	b := s.Binding()
	slot, err := filepath.EvalSymlinks(conv)
	if err != nil || !strings.HasPrefix(filepath.Base(slot), "pool-") {
		t.Fatalf("the conversation did not take the pooled agent: %q %v", slot, err)
	}
	dispose(t, reg)
	if _, err := os.Stat(filepath.Join(slot+".home", ".scripted", string(b))); err != nil {
		t.Fatalf("the pooled agent's record of its session is not in the HOME beside its workspace: %v", err)
	}
	// The agents left waiting took their workspaces and HOMEs with them.
	left, _ := filepath.Glob(filepath.Join(r.root, "pool-*"))
	if len(left) != 2 {
		t.Errorf("after dispose the root holds %v; want the taken agent's workspace and HOME only", left)
	}

	reg, inst = r.open(r.config([]string{"ACP_SCRIPTED_STATE=home"}, func(c *acp.Config) { c.KeepHome = true }))
	defer dispose(t, reg)
	rs, err := inst.Adapter().Resume(ctx, provider.ResumeRequest{SessionID: "warm", WorkingDirectory: conv, Binding: b})
	if err != nil {
		t.Fatal(err)
	}
	if got := said(turn(t, rs, "t2", "turns")); got != "turns 2" || len(r.events.of(acp.TypeSessionAfresh)) != 0 {
		t.Errorf("the pooled conversation after a restart says %q; want turns 2, not afresh", got)
	}
	if err := rs.Close(ctx, provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if err := acp.RemoveWorkspace(r.root, conv); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{conv, slot, slot + ".home"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("RemoveWorkspace left %s (%v)", p, err)
		}
	}
}

// RemoveWorkspace removes a workspace and its HOME, refuses a directory
// not under the root, and leaves a link's target outside the root alone.
func TestRemoveWorkspace(t *testing.T) {
	t.Parallel()
	root, outside := t.TempDir(), t.TempDir()
	ws := filepath.Join(root, "c1")
	for _, d := range []string{ws, ws + ".home", filepath.Join(root, "c2.home")} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := acp.RemoveWorkspace(root, ws); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, ws + ".home"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left (%v)", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "c2.home")); err != nil {
		t.Errorf("another conversation's HOME went too: %v", err)
	}
	// A workspace that is already gone is no failure.
	if err := acp.RemoveWorkspace(root, ws); err != nil {
		t.Errorf("removing it again: %v", err)
	}
	for _, bad := range []string{root, outside, filepath.Join(root, "..", "x")} {
		if err := acp.RemoveWorkspace(root, bad); err == nil {
			t.Errorf("RemoveWorkspace(%s) was accepted", bad)
		}
	}
	link := filepath.Join(root, "c3")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if err := acp.RemoveWorkspace(root, link); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a link's target outside the root was removed: %v", err)
	}
}
