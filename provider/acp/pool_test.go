package acp_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

func startedLabels(r *rig) []string {
	var out []string
	for _, e := range r.events.of(acp.TypeAgentStarted) {
		out = append(out, e.Payload.(*acp.AgentStarted).Label)
	}
	return out
}

// With a pool, agents are started and initialised ahead of need — the
// first in place of the probe — each in an empty workspace of its own; a
// new conversation takes one (its workspace becomes the conversation's,
// its events the conversation's), the pool refills once that
// conversation's first turn ended, a taken agent is
// never handed out again, a conversation whose directory already holds
// files starts cold, the conversation resumes in the same workspace, and
// disposal stops the agents left waiting and removes their workspaces.
func TestPoolTakesAWarmAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	reg, err := provider.OpenRegistry(context.Background(), []provider.Driver{r.driver},
		[]provider.Definition{{ID: "agent", Provider: acp.DefaultKey, Config: r.config(nil, func(c *acp.Config) { c.Pool = 2 })}})
	if err != nil {
		t.Fatal(err)
	}
	disposed := false
	t.Cleanup(func() {
		if !disposed {
			_ = reg.Dispose(context.Background())
		}
	})
	inst, _ := reg.Instance("agent")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := len(r.events.await(ctx, acp.TypeAgentStarted, 2)); got != 2 {
		t.Fatalf("%d agents started for a pool of 2", got)
	}
	for _, l := range startedLabels(r) {
		if !strings.HasPrefix(l, "pool-") {
			t.Errorf("an agent started that is not the pool's: %s", l)
		}
	}
	// Each is reported ready to be taken once its session is open.
	pooled := r.events.await(ctx, acp.TypeAgentPooled, 2)
	for i, e := range pooled {
		p := e.Payload.(*acp.AgentPooled)
		if !slices.Contains(startedLabels(r), p.Label) || p.TookMs <= 0 || p.Waiting != i+1 || e.Meta.SessionID != "" {
			t.Errorf("agent_pooled %d: %+v (session %q)", i, p, e.Meta.SessionID)
		}
	}

	conv := filepath.Join(r.root, "conversation")
	if err := os.Mkdir(conv, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "warm", WorkingDirectory: conv})
	if err != nil {
		t.Fatal(err)
	}
	// Its place is refilled only once its first turn has ended: no launch
	// competes with that turn.
	if got := len(r.events.of(acp.TypeAgentStarted)); got != 2 {
		t.Fatalf("%d agents started before the taken agent's first turn; want the pool's 2", got)
	}
	if got := said(turn(t, s, "t1", "writecwd a.txt pooled")); !strings.Contains(got, "wrote") {
		t.Fatalf("the pooled agent said %q", got)
	}
	slot, err := filepath.EvalSymlinks(conv)
	if err != nil || !strings.HasPrefix(filepath.Base(slot), "pool-") {
		t.Fatalf("the conversation's directory leads to %q (%v), not a pool workspace", slot, err)
	}
	if b, err := os.ReadFile(filepath.Join(conv, "a.txt")); err != nil || string(b) != "pooled" {
		t.Fatalf("the file in the conversation's workspace: %q %v", b, err)
	}
	files := r.events.of(acp.TypeFile)
	if len(files) == 0 || files[len(files)-1].Meta.SessionID != "warm" {
		t.Fatalf("the pooled agent's file event is not the conversation's: %+v", files)
	}
	// The pool refills: a third agent starts, and the conversation's is
	// not among those waiting.
	if got := len(r.events.await(ctx, acp.TypeAgentStarted, 3)); got != 3 {
		t.Fatalf("the pool did not refill: %d started", got)
	}
	if refill := r.events.await(ctx, acp.TypeAgentPooled, 3); refill[2].Payload.(*acp.AgentPooled).Waiting != 2 {
		t.Fatalf("the refilled pool reports %+v", refill[2].Payload)
	}

	// A directory that already holds files starts its own agent.
	busy := filepath.Join(r.root, "busy")
	if err := os.MkdirAll(filepath.Join(busy, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	cold, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "cold", WorkingDirectory: busy})
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(busy); fi.Mode()&os.ModeSymlink != 0 {
		t.Fatal("a directory with files was replaced by a pool workspace")
	}
	if got := len(r.events.of(acp.TypeAgentStarted)); got != 4 {
		t.Fatalf("%d agents started; want the 3 of the pool and the cold one", got)
	}
	_ = cold.Close(ctx, provider.CloseRequested)

	// The conversation resumes where its files are.
	if err := s.Close(ctx, provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	again, err := inst.Adapter().Resume(ctx, provider.ResumeRequest{SessionID: "warm", WorkingDirectory: conv, Binding: s.Binding()})
	if err != nil {
		t.Fatal(err)
	}
	if got := said(turn(t, again, "t2", "turns")); got != "turns 2" {
		t.Fatalf("the resumed conversation said %q", got)
	}
	_ = again.Close(ctx, provider.CloseRequested)

	disposed = true
	if err := reg.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(r.root, "pool-*"))
	if len(left) != 1 || left[0] != slot {
		t.Fatalf("after dispose the pool workspaces are %v; want only the conversation's %s", left, slot)
	}
	if started, stopped := len(r.events.of(acp.TypeAgentStarted)), len(r.events.of(acp.TypeAgentStopped)); started != stopped {
		t.Fatalf("%d agents started, %d stopped", started, stopped)
	}
}

// A conversation that takes a pooled agent and sends no turn does not
// hold the pool short for ever: the start timeout releases its place.
func TestPoolRefillsAfterTheStartTimeoutWithoutATurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) {
		c.Pool = 1
		c.Limits.StartTimeout = acp.Duration(8 * time.Second) // it bounds the refill's launch too
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.events.await(ctx, acp.TypeAgentPooled, 1)
	conv := filepath.Join(r.root, "idle")
	if err := os.Mkdir(conv, 0o700); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "idle", WorkingDirectory: conv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background(), provider.CloseRequested)
	if got := len(r.events.await(ctx, acp.TypeAgentPooled, 2)); got != 2 {
		t.Fatalf("the pool did not refill: %d pooled", got)
	}
	if waited := time.Since(began); waited < 8*time.Second {
		t.Fatalf("the pool refilled after %v, before the start timeout, with no turn ended", waited)
	}
}

// A pooled agent's session gets the instance's mode and model while it
// waits: the conversation that takes it runs with them, and taking it
// sends neither again.
func TestPoolConfiguresModeAndModelAhead(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) {
		c.Pool = 1
		c.Mode, c.Model = "plan", "large"
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.events.await(ctx, acp.TypeAgentPooled, 1)
	slots, _ := filepath.Glob(filepath.Join(r.root, "pool-*"))
	if len(slots) != 1 {
		t.Fatalf("pool workspaces %v; want one", slots)
	}
	const want = "set_mode plan\nset_config_option large\n"
	sets := filepath.Join(slots[0], ".scripted", "sets")
	if b, _ := os.ReadFile(sets); string(b) != want {
		t.Fatalf("while waiting, the pooled session was set %q; want %q", b, want)
	}
	conv := filepath.Join(r.root, "conversation")
	if err := os.Mkdir(conv, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "warm", WorkingDirectory: conv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background(), provider.CloseRequested)
	if got := said(turn(t, s, "t1", "mode")); got != "mode plan" {
		t.Fatalf("the conversation's agent said %q", got)
	}
	if got := said(turn(t, s, "t2", "model")); got != "model large" {
		t.Fatalf("the conversation's agent said %q", got)
	}
	if b, _ := os.ReadFile(sets); string(b) != want {
		t.Fatalf("after the take, the session was set %q; want only %q, from while it waited", b, want)
	}
}
