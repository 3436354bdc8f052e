package native_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

// A session closed while its turn waits (for a shutdown or an eviction)
// keeps the pause: what the pause held closes, and a resume comes back
// waiting on the same request, which the host answers as if the turn had
// never left.
func TestPauseSurvivesAReopen(t *testing.T) {
	t.Parallel()
	for _, reason := range []provider.CloseReason{provider.CloseShutdown, provider.CloseEvicted} {
		t.Run(string(reason), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			s := w.create(t, provider.CreateRequest{})
			req := last(turn(t, s, "t1", "call midway {}")).Request
			if req == nil || w.lab.opens() != 1 {
				t.Fatalf("the turn did not pause holding a workspace: %+v", req)
			}
			if err := s.Close(t.Context(), reason); err != nil {
				t.Fatal(err)
			}
			if w.lab.closes() != 1 {
				t.Fatalf("the pause's workspace is still open after the close (%d closed)", w.lab.closes())
			}
			r, err := w.resume(t, provider.ResumeRequest{Binding: s.Binding()})
			if err != nil {
				t.Fatal(err)
			}
			turnID, got, ok := r.Pending()
			if !ok || turnID != "t1" || got.ID != req.ID || got.Kind != provider.RequestApproval || got.Tool != "midway" {
				t.Fatalf("after resume: %q %+v %v", turnID, got, ok)
			}
			outs, err := pull(r.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
			if err != nil || last(outs).Outcome != provider.OutcomeCompleted {
				t.Fatalf("resolving after the resume: %v %v", shape(outs), err)
			}
			if !slices.Contains(shape(outs), "text:the tool said: went on after the approval") {
				t.Fatalf("the resumed turn: %v", shape(outs))
			}
			if l := last(turn(t, r, "t2", "hello")); l.Outcome != provider.OutcomeCompleted {
				t.Fatalf("the turn after: %+v", l)
			}
		})
	}
}

// A pause survives the process: an instance over the same store (the
// same agent, restarted) resumes the conversation waiting on it, and the
// approved call runs once.
func TestPauseSurvivesARestart(t *testing.T) {
	t.Parallel()
	store := native.NewMemoryStore(0)
	w1 := newWorldOn(t, store, nil)
	s := w1.create(t, provider.CreateRequest{})
	req := last(turn(t, s, "t1", "ask")).Request
	if req == nil {
		t.Fatal("no request")
	}
	if err := s.Close(t.Context(), provider.CloseShutdown); err != nil {
		t.Fatal(err)
	}
	if err := w1.reg.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}

	w2 := newWorldOn(t, store, w1.lab)
	r, err := w2.resume(t, provider.ResumeRequest{Binding: s.Binding()})
	if err != nil {
		t.Fatal(err)
	}
	if _, got, ok := r.Pending(); !ok || got.ID != req.ID {
		t.Fatalf("after the restart: %+v %v", got, ok)
	}
	outs, err := pull(r.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
	if err != nil || !slices.Contains(shape(outs), "text:done: the approved action ran") {
		t.Fatalf("resolving after the restart: %v %v", shape(outs), err)
	}
	w1.lab.mu.Lock()
	approved := w1.lab.approved
	w1.lab.mu.Unlock()
	if approved != 1 {
		t.Fatalf("the approved call ran %d times", approved)
	}
}

// A host that closes the conversation gives its waiting turn up: a later
// resume is not waiting, and the conversation goes on.
func TestCloseRequestedGivesThePauseUp(t *testing.T) {
	t.Parallel()
	store := native.NewMemoryStore(0)
	w := newWorldOn(t, store, nil)
	s := w.create(t, provider.CreateRequest{})
	req := last(turn(t, s, "t1", "ask")).Request
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Load(t.Context(), s.Binding())
	if err != nil || rec.Pending != nil || len(rec.Turns) != 1 || rec.Turns[0].ID != "t1" {
		t.Fatalf("stored after the close: %+v %v", rec, err)
	}
	r, err := w.resume(t, provider.ResumeRequest{Binding: s.Binding()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.Pending(); ok {
		t.Fatal("a given-up pause came back")
	}
	_, err = pull(r.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
	if !provider.HasCode(err, provider.CodeRequestResolutionMismatch) {
		t.Fatalf("resolving a given-up pause: %v", err)
	}
	if l := last(turn(t, r, "t2", "hello")); l.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the turn after: %+v", l)
	}
}

// savesStore records, for every save, whether the record was waiting.
type savesStore struct {
	*native.MemoryStore
	mu      sync.Mutex
	waiting []bool
}

func (s *savesStore) Save(ctx context.Context, b provider.Binding, r native.Record) error {
	s.mu.Lock()
	s.waiting = append(s.waiting, r.Pending != nil)
	s.mu.Unlock()
	return s.MemoryStore.Save(ctx, b, r)
}

// Answering a pause stores the conversation without it before the run
// goes on: a process lost mid-way loses the pause rather than running the
// approved call twice.
func TestResolveForgetsTheStoredPauseFirst(t *testing.T) {
	t.Parallel()
	store := &savesStore{MemoryStore: native.NewMemoryStore(0)}
	w := newWorldOn(t, store, nil)
	s := w.create(t, provider.CreateRequest{})
	req := last(turn(t, s, "t1", "ask")).Request
	if _, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true})); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	// created, paused, answering, answered
	if want := []bool{false, true, false, false}; !slices.Equal(store.waiting, want) {
		t.Fatalf("saves waiting %v; want %v", store.waiting, want)
	}
}

// A branch continues a completed turn, so it waits on nothing even when
// its source does.
func TestBranchOfAWaitingConversationWaitsOnNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	turn(t, s, "t1", "hello")
	if last(turn(t, s, "t2", "ask")).Request == nil {
		t.Fatal("no request")
	}
	b, err := w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: s.Binding(), TurnID: "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := b.Pending(); ok {
		t.Fatal("the branch is waiting")
	}
	if l := last(turn(t, b, "t3", "hello")); l.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the branch's turn: %+v", l)
	}
}

// failingStore fails the saves it is told to.
type failingStore struct {
	*native.MemoryStore
	mu   sync.Mutex
	fail bool
}

func (f *failingStore) Save(ctx context.Context, b provider.Binding, r native.Record) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return errors.New("the disk is full")
	}
	return f.MemoryStore.Save(ctx, b, r)
}

// A pause whose answer cannot be stored first is not answered: the turn
// still waits, and a later resolution goes through.
func TestResolveThatCannotStoreDoesNotStart(t *testing.T) {
	t.Parallel()
	store := &failingStore{MemoryStore: native.NewMemoryStore(0)}
	w := newWorldOn(t, store, nil)
	s := w.create(t, provider.CreateRequest{})
	req := last(turn(t, s, "t1", "ask")).Request
	store.mu.Lock()
	store.fail = true
	store.mu.Unlock()
	res := provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}
	_, err := pull(s.Resolve(t.Context(), res))
	if !errors.Is(err, provider.ErrNotStarted) {
		t.Fatalf("resolving without a store: %v", err)
	}
	if _, got, ok := s.Pending(); !ok || got.ID != req.ID {
		t.Fatalf("after the failed resolution: %+v %v", got, ok)
	}
	w.lab.mu.Lock()
	ran := w.lab.approved
	w.lab.mu.Unlock()
	if ran != 0 {
		t.Fatal("the approved call ran although the answer was not stored")
	}
	store.mu.Lock()
	store.fail = false
	store.mu.Unlock()
	if outs, err := pull(s.Resolve(t.Context(), res)); err != nil || last(outs).Outcome != provider.OutcomeCompleted {
		t.Fatalf("resolving again: %v %v", shape(outs), err)
	}
}
