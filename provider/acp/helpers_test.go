package acp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// recorder keeps the events a driver emits.
type recorder struct {
	mu      sync.Mutex
	events  []event.Event
	changed chan struct{} // closed at the next event
}

func (r *recorder) add(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
}

// await waits until n events of type t were recorded, or ctx ends.
func (r *recorder) await(ctx context.Context, t event.Type, n int) []event.Event {
	for {
		r.mu.Lock()
		var out []event.Event
		for _, e := range r.events {
			if e.Type == t {
				out = append(out, e)
			}
		}
		if len(out) >= n {
			r.mu.Unlock()
			return out
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return out
		}
	}
}

func (r *recorder) of(t event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// scriptedCommand is the scripted agent's argv: this test binary.
func scriptedCommand(t testing.TB) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe}
}

// rig is a workspace root, a driver over the scripted agent, and what it
// emitted.
type rig struct {
	t      testing.TB
	root   string
	ws     string
	events *recorder
	driver *acp.Driver
}

func newRig(t testing.TB, launcher acp.Launcher, opts ...func(*acp.Options)) *rig {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if launcher == nil {
		launcher = acp.Unjailed(acp.UnjailedOptions{HomeDir: t.TempDir()})
	}
	r := &rig{t: t, root: root, ws: ws, events: &recorder{}}
	o := acp.Options{Launcher: launcher, Events: r.events.add}
	for _, f := range opts {
		f(&o)
	}
	d, err := acp.NewDriver(o)
	if err != nil {
		t.Fatal(err)
	}
	r.driver = d
	return r
}

// config is the definition's configuration: the scripted agent with the
// given extra env entries, edited by edit.
func (r *rig) config(env []string, edit func(*acp.Config)) json.RawMessage {
	c := acp.Config{Command: scriptedCommand(r.t), Env: append([]string{"ACP_SCRIPTED_AGENT=1"}, env...), WorkspaceRoot: r.root}
	if edit != nil {
		edit(&c)
	}
	b, err := json.Marshal(c)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// instance opens a registry with one instance; it is disposed when the
// test ends.
func (r *rig) instance(cfg json.RawMessage) *provider.Instance {
	r.t.Helper()
	reg, err := provider.OpenRegistry(context.Background(), []provider.Driver{r.driver},
		[]provider.Definition{{ID: "agent", Provider: acp.DefaultKey, Config: cfg}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		if err := reg.Dispose(context.Background()); err != nil {
			r.t.Errorf("dispose: %v", err)
		}
	})
	inst, err := reg.Instance("agent")
	if err != nil {
		r.t.Fatal(err)
	}
	return inst
}

func (r *rig) create(inst *provider.Instance, id string) *provider.ValidatedSession {
	r.t.Helper()
	s, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: id, WorkingDirectory: r.ws})
	if err != nil {
		r.t.Fatal(err)
	}
	vs := s
	r.t.Cleanup(func() { _ = vs.Close(context.Background(), provider.CloseRequested) })
	return vs
}

// turn runs a turn to its boundary, failing the test on an error.
func turn(t testing.TB, s *provider.ValidatedSession, id, input string) []provider.Output {
	t.Helper()
	outs, err := tryTurn(s, id, input)
	if err != nil {
		t.Fatalf("turn %s: %v", id, err)
	}
	return outs
}

func tryTurn(s *provider.ValidatedSession, id, input string) ([]provider.Output, error) {
	var outs []provider.Output
	for o, err := range s.RunTurn(context.Background(), provider.TurnRequest{TurnID: id, Input: input}) {
		if err != nil {
			return outs, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// said joins a turn's text outputs.
func said(outs []provider.Output) string {
	var b strings.Builder
	for _, o := range outs {
		if o.Kind == provider.OutputText {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

func last(outs []provider.Output) provider.Output {
	if len(outs) == 0 {
		return provider.Output{}
	}
	return outs[len(outs)-1]
}
