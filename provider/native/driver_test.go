package native_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

func TestNewDriverChecksItsConfig(t *testing.T) {
	t.Parallel()
	build := func(context.Context, provider.Definition) (agent.Options, error) {
		return agent.Options{Model: &promptModel{}}, nil
	}
	if _, err := native.NewDriver(native.Config{}); err == nil || !strings.Contains(err.Error(), "Config.Agent") {
		t.Fatalf("no factory: %v", err)
	}
	if _, err := native.NewDriver(native.Config{Key: "Not A Key", Agent: build}); err == nil {
		t.Fatal("a malformed key was accepted")
	}
	d, err := native.NewDriver(native.Config{Key: "my-agent", Agent: build})
	if err != nil {
		t.Fatal(err)
	}
	if d.ProviderKey() != "my-agent" || !d.SupportsMultipleInstances() {
		t.Fatalf("driver %q multiple=%v", d.ProviderKey(), d.SupportsMultipleInstances())
	}
	// The capabilities declare what the adapter implements, under the key.
	caps, err := provider.CheckCapabilities(native.Capabilities("my-agent"))
	if err != nil {
		t.Fatal(err)
	}
	if !caps.Sessions.Resume || caps.Sessions.Branch != provider.BranchThroughTurn || !caps.Turns.Interrupt || caps.Turns.Steer ||
		!caps.Requests.Approval || caps.Requests.Elicitation || !caps.HostBinding.Supported ||
		!slices.Equal(caps.HostBinding.InstructionPlacements, []provider.Placement{provider.PlacementContext}) || caps.Authentication.Supported {
		t.Fatalf("capabilities %+v", caps)
	}
}

// Each instance gets the agent its definition asks for; a factory that
// fails, or options agent.New refuses, fail the registry's opening.
func TestMaterializeBuildsAnAgentPerInstance(t *testing.T) {
	t.Parallel()
	var asked []string
	d, err := native.NewDriver(native.Config{Agent: func(ctx context.Context, def provider.Definition) (agent.Options, error) {
		asked = append(asked, def.ID+" "+string(def.Config))
		switch def.ID {
		case "broken":
			return agent.Options{}, errors.New("no model configured")
		case "invalid":
			return agent.Options{}, nil // no model: agent.New refuses
		}
		return agent.Options{Model: &promptModel{}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := provider.OpenRegistry(t.Context(), []provider.Driver{d}, []provider.Definition{
		{ID: "a", Provider: native.DefaultKey, Config: []byte(`{"model":"small"}`)},
		{ID: "b", Provider: native.DefaultKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Dispose(context.Background())
	if !slices.Equal(asked, []string{`a {"model":"small"}`, "b "}) {
		t.Fatalf("the factory was asked %q", asked)
	}
	for _, id := range []string{"a", "b"} {
		inst, err := reg.Instance(id)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := inst.Readiness(t.Context()); err != nil || r != provider.Ready {
			t.Fatalf("readiness %s %v", r, err)
		}
	}
	for _, id := range []string{"broken", "invalid"} {
		_, err := provider.OpenRegistry(t.Context(), []provider.Driver{d}, []provider.Definition{{ID: id, Provider: native.DefaultKey}})
		var oe *provider.OperationError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), "instance "+id) {
			t.Errorf("%s: %v", id, err)
		}
	}
}

// raw is a native session without the validated wrapper in front, for
// the orderings the wrapper's serialisation makes hard to reach.
func raw(t *testing.T) (provider.Session, *promptModel) {
	t.Helper()
	m := &promptModel{}
	d, err := native.NewDriver(native.Config{Agent: func(context.Context, provider.Definition) (agent.Options, error) {
		return agent.Options{Model: m, Tools: newLab().tools()}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	mat, err := d.Materialize(t.Context(), provider.Definition{ID: "raw", Provider: native.DefaultKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mat.Dispose(context.Background()) })
	s, err := mat.Adapter.Create(t.Context(), provider.CreateRequest{SessionID: "raw", WorkingDirectory: "/", OnBinding: func(provider.Binding) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background(), provider.CloseRequested) })
	return s, m
}

// An interrupt that reaches the session before the turn's run begins
// still ends that turn.
func TestInterruptBeforeTheRunBegins(t *testing.T) {
	t.Parallel()
	s, m := raw(t)
	if err := s.(provider.Interrupter).Interrupt(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "hello"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := shape(outs); !slices.Equal(got, []string{"turn.started", "turn.completed:interrupted"}) {
		t.Fatalf("outputs %q", got)
	}
	if n := len(m.seen()); n != 0 {
		t.Fatalf("the model was called %d times", n)
	}
	outs, _ = pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t2", Input: "hello"}))
	if last(outs).Outcome != provider.OutcomeCompleted {
		t.Fatalf("the next turn: %q", shape(outs))
	}
}

// A resolution that arrives just after an interrupt ended its waiting
// turn says the turn ended, interrupted.
func TestResolveAfterTheWaitingTurnWasInterrupted(t *testing.T) {
	t.Parallel()
	s, _ := raw(t)
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "ask"}))
	if err != nil {
		t.Fatal(err)
	}
	req := last(outs).Request
	if err := s.(provider.Interrupter).Interrupt(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	outs, err = pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
	if err != nil || !slices.Equal(shape(outs), []string{"turn.completed:interrupted"}) {
		t.Fatalf("resolve: %q %v", shape(outs), err)
	}
	// Any other resolution did not start anything.
	_, err = pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t9", RequestID: req.ID, Approve: true}))
	if !errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("a stray resolution: %v", err)
	}
}

// Turns after the agent shut down did not start.
func TestTurnAfterDisposeDidNotStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	if err := w.inst.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "hello"}))
	if !errors.Is(err, agent.ErrShutdown) || !errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("a turn after dispose: %v", err)
	}
}

func TestStoreIsPluggable(t *testing.T) {
	t.Parallel()
	store := native.NewMemoryStore(1)
	d, err := native.NewDriver(native.Config{Store: store, Agent: func(context.Context, provider.Definition) (agent.Options, error) {
		return agent.Options{Model: &promptModel{}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := provider.OpenRegistry(t.Context(), []provider.Driver{d}, []provider.Definition{{ID: "x", Provider: native.DefaultKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Dispose(context.Background())
	inst, _ := reg.Instance("x")
	open := func(i int) *provider.ValidatedSession {
		s, err := inst.Adapter().Create(t.Context(), provider.CreateRequest{SessionID: fmt.Sprint("s", i), WorkingDirectory: "/"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := open(1)
	turn(t, first, "t1", "say kept")
	rec, err := store.Load(t.Context(), first.Binding())
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Conversation.Messages) != 2 || len(rec.Turns) != 1 || rec.Turns[0] != (native.TurnMark{ID: "t1", Messages: 2}) {
		t.Fatalf("stored %+v", rec)
	}
	first.Close(t.Context(), provider.CloseRequested)
	second := open(2) // the store holds one conversation: the first is forgotten
	defer second.Close(context.Background(), provider.CloseRequested)
	_, err = inst.Adapter().Resume(t.Context(), provider.ResumeRequest{SessionID: "s3", WorkingDirectory: "/", Binding: first.Binding()})
	if !errors.Is(err, native.ErrConversationNotFound) {
		t.Fatalf("resuming a forgotten conversation: %v", err)
	}
}

// A session refuses a turn while closing or while a request waits, before
// anything starts.
func TestRawSessionRefusals(t *testing.T) {
	t.Parallel()
	s, _ := raw(t)
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "ask"}))
	if err != nil || last(outs).Kind != provider.OutputRequest {
		t.Fatalf("ask: %q %v", shape(outs), err)
	}
	if _, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t2", Input: "hello"})); !errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("a turn while a request waits: %v", err)
	}
	if err := s.Close(t.Context(), provider.CloseShutdown); err != nil {
		t.Fatal(err)
	}
	if _, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t3", Input: "hello"})); !errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("a turn after close: %v", err)
	}
	if _, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: last(outs).Request.ID, Approve: true})); !errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("a resolution after close: %v", err)
	}
}

// A model that panics does not take the host down: the turn is an error
// and the session is no longer trusted.
func TestPanickingModel(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "panic"}))
	var pe *provider.PanicError
	if !errors.As(err, &pe) || !slices.Equal(shape(outs), []string{"turn.started"}) {
		t.Fatalf("a panicking model: %q %v", shape(outs), err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after the panic: %v", s.Err())
	}
}

// A turn running when the instance is disposed is cancelled by the
// agent's shutdown: an error, and the session is no longer trusted.
func TestShutdownDuringATurnIsAnError(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		var turnErr error
		for o, err := range s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "hold"}) {
			if o.Kind == provider.OutputTurnStarted {
				close(started)
			}
			if err != nil {
				turnErr = err
			}
		}
		errc <- turnErr
	}()
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no grace: running turns are cancelled at once
	if err := w.inst.Dispose(ctx); err == nil {
		t.Fatal("a shutdown that cancelled a run reported nothing")
	}
	if err := <-errc; !errors.Is(err, agent.ErrShutdown) || errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("the turn cut by shutdown: %v", err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after shutdown: %v", s.Err())
	}
}
