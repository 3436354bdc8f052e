package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// Identity is the host's: absent stays nil; given, it reaches every tool
// call as given, with nothing filled in.
func TestIdentityIsPassedNeverSynthesised(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	anon := w.create(t, provider.CreateRequest{SessionID: "anon-session"})
	turn(t, anon, "t1", "call who {}")
	acme := w.create(t, provider.CreateRequest{Configuration: identityConfig("acme", "alice")})
	turn(t, acme, "t1", "call who {}")

	w.lab.mu.Lock()
	ids := w.lab.identities
	w.lab.mu.Unlock()
	if len(ids) != 2 {
		t.Fatalf("%d calls", len(ids))
	}
	if ids[0] != nil {
		t.Fatalf("a session without identity gave the tool %+v", ids[0])
	}
	if *ids[1] != (tool.Identity{Tenant: "acme", Principal: "alice"}) {
		t.Fatalf("the tool was told %+v", ids[1])
	}
	// The agent's events carry the identity given, and none where none was.
	for _, e := range w.sink.of(tool.TypeCallStart) {
		switch e.Meta.SessionID {
		case "anon-session":
			if e.Meta.Tenant != "" || e.Meta.Principal != "" {
				t.Fatalf("anonymous event meta %+v", e.Meta)
			}
		default:
			if e.Meta.Tenant != "acme" || e.Meta.Principal != "alice" {
				t.Fatalf("event meta %+v", e.Meta)
			}
		}
	}
}

func TestConfigurationIsChecked(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, cfg := range []string{
		`{"identitty":{"tenant":"acme"}}`,
		`{"identity":{"tenant":"acme","role":"admin"}}`,
		`{"identity":"acme"}`,
	} {
		_, err := w.inst.Adapter().Create(t.Context(), provider.CreateRequest{SessionID: w.sessionID(), WorkingDirectory: w.dir,
			Configuration: json.RawMessage(cfg)})
		var ce *native.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("configuration %s: %v", cfg, err)
		}
		if strings.Contains(err.Error(), "acme") {
			t.Errorf("the error quotes the configuration: %v", err)
		}
	}
}

func TestBindingIsANewConversationIdentity(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	seen := map[provider.Binding]bool{}
	for range 3 {
		var told provider.Binding
		s := w.create(t, provider.CreateRequest{OnBinding: func(b provider.Binding) { told = b }})
		b := s.Binding()
		if told != b || seen[b] || !strings.HasPrefix(string(b), "native-") || len(b) != len("native-")+32 || strings.Contains(string(b), s.ID()) {
			t.Fatalf("binding %q (told %q) for session %q", b, told, s.ID())
		}
		seen[b] = true
	}
}

func TestResumeContinuesTheConversation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := identityConfig("acme", "alice")
	s := w.create(t, provider.CreateRequest{Configuration: cfg})
	turn(t, s, "t1", "say one")
	b := s.Binding()

	// While it is open, nobody else can resume it.
	if _, err := w.resume(t, provider.ResumeRequest{Binding: b, Configuration: cfg}); !errors.Is(err, native.ErrConversationOpen) {
		t.Fatalf("resuming an open conversation: %v", err)
	}
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	r, err := w.resume(t, provider.ResumeRequest{Binding: b, Configuration: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if r.Binding() != b {
		t.Fatalf("resumed binding %q, want %q", r.Binding(), b)
	}
	turn(t, r, "t2", "say two")
	reqs := w.model.seen()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 3 || msgs[0].Content != "say one" || msgs[1].Content != "one" || msgs[2].Content != "say two" {
		t.Fatalf("the resumed conversation is %+v", msgs)
	}
}

func TestResumeOfAnEmptyConversation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	r, err := w.resume(t, provider.ResumeRequest{Binding: s.Binding()})
	if err != nil {
		t.Fatal(err)
	}
	turn(t, r, "t1", "hello")
}

// A binding is no key to another identity's conversation: resuming or
// branching it under any other identity is told it does not exist, the
// same as a binding nobody made.
func TestAnotherIdentityCannotResumeOrBranch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alice := identityConfig("acme", "alice")
	s := w.create(t, provider.CreateRequest{Configuration: alice})
	turn(t, s, "t1", "say secret plans")
	b := s.Binding()
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]json.RawMessage{
		"another principal": identityConfig("acme", "mallory"),
		"another tenant":    identityConfig("evil", "alice"),
		"no identity":       nil,
		"a partial one":     native.SessionConfig{Identity: &tool.Identity{Tenant: "acme"}}.JSON(),
		"a conversation id": native.SessionConfig{Identity: &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "x"}}.JSON(),
	} {
		_, err := w.resume(t, provider.ResumeRequest{Binding: b, Configuration: cfg})
		if !errors.Is(err, native.ErrConversationNotFound) {
			t.Errorf("resume under %s: %v", name, err)
		}
		_, err = w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: b, TurnID: "t1"}, Configuration: cfg})
		if !errors.Is(err, native.ErrConversationNotFound) {
			t.Errorf("branch under %s: %v", name, err)
		}
	}
	_, unknown := w.resume(t, provider.ResumeRequest{Binding: "native-00000000000000000000000000000000", Configuration: alice})
	_, other := w.resume(t, provider.ResumeRequest{Binding: b, Configuration: identityConfig("evil", "mallory")})
	if unknown.Error() != other.Error() {
		t.Fatalf("an unknown binding says %q; another identity's says %q", unknown, other)
	}
	if _, err := w.resume(t, provider.ResumeRequest{Binding: b, Configuration: alice}); err != nil {
		t.Fatalf("the owner's resume: %v", err)
	}
}

func TestSessionIDsAreNotShared(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{SessionID: "shared"})
	_, err := w.inst.Adapter().Create(t.Context(), provider.CreateRequest{SessionID: "shared", WorkingDirectory: w.dir})
	if !errors.Is(err, native.ErrSessionIDInUse) {
		t.Fatalf("a second session with the id: %v", err)
	}
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	w.create(t, provider.CreateRequest{SessionID: "shared"}) // free once closed
}

func TestBranchCopiesThroughTheTurn(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	src := w.create(t, provider.CreateRequest{})
	turn(t, src, "t1", "say one")
	turn(t, src, "t2", "say two")
	var told []provider.Binding
	br, err := w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: src.Binding(), TurnID: "t1"},
		OnBinding: func(b provider.Binding) { told = append(told, b) }})
	if err != nil {
		t.Fatal(err)
	}
	if br.Binding() == src.Binding() || len(told) != 1 || told[0] != br.Binding() {
		t.Fatalf("branch binding %q, told %q, source %q", br.Binding(), told, src.Binding())
	}
	turn(t, br, "b1", "say three")
	reqs := w.model.seen()
	if msgs := reqs[len(reqs)-1].Messages; len(msgs) != 3 || msgs[1].Content != "one" || msgs[2].Content != "say three" {
		t.Fatalf("the branch's model saw %+v", msgs)
	}
	// The source is untouched and goes on.
	turn(t, src, "t3", "say four")
	reqs = w.model.seen()
	if msgs := reqs[len(reqs)-1].Messages; len(msgs) != 5 || msgs[3].Content != "two" {
		t.Fatalf("the source's model saw %+v", msgs)
	}
	// A branch of the branch, through its own turn.
	bb, err := w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: br.Binding(), TurnID: "b1"}})
	if err != nil {
		t.Fatal(err)
	}
	turn(t, bb, "c1", "hello")
	reqs = w.model.seen()
	if msgs := reqs[len(reqs)-1].Messages; len(msgs) != 5 || msgs[3].Content != "three" {
		t.Fatalf("the second branch's model saw %+v", msgs)
	}
}

func TestBranchThroughAnUnfinishedTurnIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	src := w.create(t, provider.CreateRequest{})
	turn(t, src, "t1", "hello")
	turn(t, src, "t2", "ask") // waiting: not completed
	for _, id := range []string{"t2", "t9"} {
		if _, err := w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: src.Binding(), TurnID: id}}); !errors.Is(err, native.ErrTurnNotFound) {
			t.Errorf("branch through %s: %v", id, err)
		}
	}
	// Interrupted and failed turns are completed turns: a branch can go
	// through them.
	if err := src.Interrupt(t.Context(), "t2"); err != nil {
		t.Fatal(err)
	}
	turn(t, src, "t3", "fail")
	for _, id := range []string{"t2", "t3"} {
		if _, err := w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: src.Binding(), TurnID: id}}); err != nil {
			t.Errorf("branch through %s: %v", id, err)
		}
	}
}

// Close fires the session's own session-scoped tool sessions, and nobody
// else's.
func TestCloseFiresTheSessionsToolSessions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.create(t, provider.CreateRequest{})
	b := w.create(t, provider.CreateRequest{})
	for _, s := range []*provider.ValidatedSession{a, b} {
		for i := range 2 {
			turn(t, s, fmt.Sprint("t", i), `call workspace {"scope":"session"}`)
		}
	}
	if w.lab.opens() != 2 || w.lab.closes() != 0 {
		t.Fatalf("%d opened, %d closed before any close", w.lab.opens(), w.lab.closes())
	}
	if err := a.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if w.lab.closes() != 1 {
		t.Fatalf("closing one session closed %d workspaces", w.lab.closes())
	}
	closed := w.sink.of(tool.TypeSessionClosed)
	if len(closed) != 1 || closed[0].Meta.SessionID != a.ID() || closed[0].Payload.(*tool.SessionClosed).Reason != "session-end" {
		t.Fatalf("close events %+v", closed)
	}
	if err := b.Close(t.Context(), provider.CloseEvicted); err != nil {
		t.Fatal(err)
	}
	closed = w.sink.of(tool.TypeSessionClosed)
	if len(closed) != 2 || closed[1].Payload.(*tool.SessionClosed).Reason != "evicted" {
		t.Fatalf("close events %+v", closed)
	}
}

// Close gives up a waiting request: what the paused run holds closes.
func TestCloseAbandonsAPause(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	turn(t, s, "t1", "call midway {}")
	if w.lab.opens() != 1 || w.lab.closes() != 0 {
		t.Fatal("the paused call holds no workspace")
	}
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if w.lab.closes() != 1 {
		t.Fatalf("closing a paused session closed %d workspaces", w.lab.closes())
	}
}

// Close stops a running turn and waits for it; the puller learns the
// session closed.
func TestCloseDuringATurn(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	var wg sync.WaitGroup
	started := make(chan struct{})
	var turnErr error
	wg.Go(func() {
		for o, err := range s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "hold"}) {
			if o.Kind == provider.OutputTurnStarted {
				close(started)
			}
			if err != nil {
				turnErr = err
			}
		}
	})
	<-started
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !provider.HasCode(turnErr, provider.CodeSessionClosed) {
		t.Fatalf("the turn's puller got %v", turnErr)
	}
}

// A turn that will not stop makes Close fail within its deadline, and a
// later Close finishes the job.
func TestCloseWaitsForTheTurnAndIsRetryable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	stubborn := tool.Func("stubborn", "ignores cancellation until released", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		entered <- struct{}{}
		<-release
		return "done", nil
	})
	w := newWorld(t, func(o *agent.Options) { o.Tools = append(o.Tools, stubborn) })
	s := w.create(t, provider.CreateRequest{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for range s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "call stubborn {}"}) {
		}
	})
	<-entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.Close(ctx, provider.CloseRequested)
	var ce *provider.CleanupError
	if !errors.As(err, &ce) {
		t.Fatalf("close with a stuck turn: %v", err)
	}
	close(release)
	if err := ce.RetryCleanup(t.Context()); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionClosed) {
		t.Fatalf("after the retry: %v", s.Err())
	}
}

// Disposing the instance shuts the agent down: its sinks are closed and
// nothing it ran is left.
func TestDisposeShutsTheAgentDown(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	turn(t, s, "t1", `call workspace {"scope":"session"}`)
	if err := w.reg.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !w.sink.isClosed() {
		t.Fatal("the agent's sink is still open")
	}
	if w.lab.closes() != 1 {
		t.Fatalf("shutdown closed %d workspaces", w.lab.closes())
	}
	if err := w.reg.Dispose(t.Context()); err != nil {
		t.Fatalf("a second dispose: %v", err)
	}
}

// The run executes inside the host's pull, so a host may close the
// session from its own loop body without waiting on itself: the run
// stops, and the session's tool sessions close as soon as the host lets
// go of the output it holds.
func TestCloseFromTheLoopBody(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	var turnErr error
	closed := false
	for o, err := range s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: `call workspace {"scope":"session"}`}) {
		if err != nil {
			turnErr = err
			continue
		}
		if o.Kind == provider.OutputActivity && !closed {
			closed = true
			if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
				t.Fatalf("closing from the loop body: %v", err)
			}
		}
	}
	if !closed {
		t.Fatal("the turn reported no activity")
	}
	if turnErr != nil && !provider.HasCode(turnErr, provider.CodeSessionClosed) {
		t.Fatalf("the turn ended with %v", turnErr)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionClosed) {
		t.Fatalf("after close: %v", s.Err())
	}
	if w.lab.opens() != w.lab.closes() {
		t.Fatalf("%d workspaces opened, %d closed once the loop ended", w.lab.opens(), w.lab.closes())
	}
}

// A host pulling with iter.Pull may close between two pulls; stopping the
// pull lets the run end and close what it held.
func TestCloseBetweenPulls(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	next, stop := iter.Pull2(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: `call workspace {"scope":"session"}`}))
	for {
		o, err, ok := next()
		if !ok || err != nil {
			t.Fatalf("the turn ended before its first tool call: %v", err)
		}
		if o.Kind == provider.OutputActivity {
			break
		}
	}
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatalf("closing between pulls: %v", err)
	}
	stop()
	if w.lab.opens() != w.lab.closes() {
		t.Fatalf("%d workspaces opened, %d closed", w.lab.opens(), w.lab.closes())
	}
}

// A host whose loop body panics gets its panic back, on its own
// goroutine; the run is stopped first and leaves nothing open.
func TestHostPanicInTheLoopBody(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	got := func() (v any) {
		defer func() { v = recover() }()
		for o := range s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: `calls workspace {"scope":"run"}`}) {
			if o.Kind == provider.OutputActivity {
				panic("the host tripped")
			}
		}
		return nil
	}()
	if got != "the host tripped" {
		t.Fatalf("recovered %v", got)
	}
	if w.lab.opens() != w.lab.closes() {
		t.Fatalf("%d workspaces opened, %d closed", w.lab.opens(), w.lab.closes())
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after the host's panic: %v", s.Err())
	}
}
