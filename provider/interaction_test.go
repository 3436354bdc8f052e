package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
)

// person is the host's Interactions: it records what it was asked and
// answers with answer (or declines, or blocks until its context ends).
type person struct {
	mu      sync.Mutex
	asked   []provider.Interaction
	session []string
	answer  provider.InteractionReply
	block   chan struct{} // when set, Interact waits on it or its ctx
	blocked chan struct{}
	err     error
	panics  bool
}

func (p *person) Interact(ctx context.Context, sessionID string, in provider.Interaction) (provider.InteractionReply, error) {
	p.mu.Lock()
	p.asked = append(p.asked, in)
	p.session = append(p.session, sessionID)
	block, blocked, answer, err, panics := p.block, p.blocked, p.answer, p.err, p.panics
	p.mu.Unlock()
	if panics {
		panic("the person's phone is on fire")
	}
	if block != nil {
		blocked <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
			return provider.InteractionReply{}, context.Cause(ctx)
		}
	}
	return answer, err
}

func (p *person) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.asked)
}

// interactingProv declares kinds and hands the test the facade each
// opening received.
func interactingProv(kinds ...provider.InteractionKind) (*tprov, *[]provider.Interactions) {
	tp := newTprov()
	tp.caps.Interactions.Kinds = kinds
	var mu sync.Mutex
	var got []provider.Interactions
	tp.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		mu.Lock()
		got = append(got, req.Interactions)
		mu.Unlock()
		b := provider.Binding(fmt.Sprintf("native-%d", tp.n.Add(1)))
		req.OnBinding(b)
		_, s := tp.newSession(req.SessionID, b, req.HostTools)
		return s, nil
	}
	return tp, &got
}

func openWith(t *testing.T, v *provider.Validated, id string, ia provider.Interactions) (*provider.ValidatedSession, error) {
	t.Helper()
	req := createReq(id)
	req.Interactions = ia
	return v.Create(t.Context(), req)
}

func question(id string, options ...string) provider.Interaction {
	return provider.Interaction{ID: id, Kind: provider.InteractionQuestion, Message: "Which branch should I push to?", Options: options}
}

func TestInteractionsReachTheHost(t *testing.T) {
	t.Parallel()
	tp, got := interactingProv(provider.InteractionQuestion, provider.InteractionNotice)
	var mu sync.Mutex
	var events []event.Event
	v := tp.validated(t, provider.WithEvents(func(e event.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	p := &person{answer: provider.InteractionReply{Answer: "main"}}
	s, err := openWith(t, v, "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	ia := (*got)[0]
	if ia == nil || ia == provider.Interactions(p) {
		t.Fatalf("the provider was handed %T; want the wrapper's facade", ia)
	}
	r, err := ia.Interact(t.Context(), "s1", question("i1", "main", "dev"))
	if err != nil || r != (provider.InteractionReply{Answer: "main"}) {
		t.Fatalf("question: %+v %v", r, err)
	}
	// A notice is acknowledged: whatever the host says, the reply is empty.
	r, err = ia.Interact(t.Context(), "s1", provider.Interaction{ID: "i2", Kind: provider.InteractionNotice, Message: "Tests pass.\n\tAll 12."})
	if err != nil || r != (provider.InteractionReply{}) {
		t.Fatalf("notice: %+v %v", r, err)
	}
	// A declined question has no answer, whatever the host filled in.
	p.mu.Lock()
	p.answer = provider.InteractionReply{Answer: "leaked", Declined: true}
	p.mu.Unlock()
	r, err = ia.Interact(t.Context(), "s1", question("i3"))
	if err != nil || r != (provider.InteractionReply{Declined: true}) {
		t.Fatalf("declined: %+v %v", r, err)
	}
	if p.session[0] != "s1" || p.asked[0].Message != "Which branch should I push to?" || len(p.asked[0].Options) != 2 {
		t.Fatalf("the host heard %v %+v", p.session, p.asked)
	}
	// Events describe; they never quote.
	mu.Lock()
	defer mu.Unlock()
	var outcomes []string
	for _, e := range events {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), "branch") || strings.Contains(string(b), "Tests pass") || strings.Contains(string(b), "main") {
			t.Fatalf("an event quotes the interaction: %s", b)
		}
		if pi, ok := e.Payload.(*provider.InteractionEvent); ok && e.Type == provider.TypeInteractionEnd {
			outcomes = append(outcomes, pi.Outcome)
			if e.Meta.SessionID != "s1" || pi.MessageBytes == 0 {
				t.Fatalf("interaction event %+v %+v", e.Meta, pi)
			}
		}
	}
	if strings.Join(outcomes, ",") != "answered,acknowledged,declined" {
		t.Fatalf("outcomes %v", outcomes)
	}
}

func TestInteractionsRefused(t *testing.T) {
	t.Parallel()
	tp, got := interactingProv(provider.InteractionQuestion)
	p := &person{answer: provider.InteractionReply{Answer: "yes"}}
	s, err := openWith(t, tp.validated(t), "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	ia := (*got)[0]
	if _, err := ia.Interact(t.Context(), "s1", question("used")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", provider.MaxInteractionMessageBytes+1)
	many := make([]string, provider.MaxInteractionOptions+1)
	for i := range many {
		many[i] = fmt.Sprint("option ", i)
	}
	for _, tc := range []struct {
		name    string
		session string
		in      provider.Interaction
		code    provider.Code
	}{
		{"another session", "s2", question("a"), provider.CodeInvalidSessionInteraction},
		{"malformed id", "s1", question(" a"), provider.CodeInvalidSessionInteraction},
		{"unknown kind", "s1", provider.Interaction{ID: "b", Kind: "poll", Message: "hi"}, provider.CodeInvalidSessionInteraction},
		{"undeclared kind", "s1", provider.Interaction{ID: "c", Kind: provider.InteractionNotice, Message: "hi"}, provider.CodeSessionInteractionsUnsupported},
		{"empty message", "s1", provider.Interaction{ID: "d", Kind: provider.InteractionQuestion}, provider.CodeInvalidSessionInteraction},
		{"long message", "s1", provider.Interaction{ID: "e", Kind: provider.InteractionQuestion, Message: long}, provider.CodeInvalidSessionInteraction},
		{"control character", "s1", provider.Interaction{ID: "f", Kind: provider.InteractionQuestion, Message: "bell\a"}, provider.CodeInvalidSessionInteraction},
		{"bidi override", "s1", provider.Interaction{ID: "g", Kind: provider.InteractionQuestion, Message: "abc\u202edef"}, provider.CodeInvalidSessionInteraction},
		{"too many options", "s1", question("h", many...), provider.CodeInvalidSessionInteraction},
		{"repeated option", "s1", question("i", "yes", "yes"), provider.CodeInvalidSessionInteraction},
		{"empty option", "s1", question("j", ""), provider.CodeInvalidSessionInteraction},
		{"reused id", "s1", question("used"), provider.CodeInvalidSessionInteraction},
		{"answer not among the options", "s1", question("k", "left", "right"), provider.CodeInvalidSessionInteraction},
	} {
		_, err := ia.Interact(t.Context(), tc.session, tc.in)
		if !provider.HasCode(err, tc.code) {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.code)
		}
		if err != nil && (strings.Contains(err.Error(), "branch") || strings.Contains(err.Error(), long[:20])) {
			t.Errorf("%s: the refusal quotes the interaction: %v", tc.name, err)
		}
	}
	sawCode(provider.CodeInvalidSessionInteraction)
	sawCode(provider.CodeSessionInteractionsUnsupported)
	// Refused interactions never reached the person (the answer outside
	// the options did: it is the reply that was refused).
	if n := p.count(); n != 2 {
		t.Fatalf("the person was asked %d times", n)
	}
}

// A provider that declares no interactions is handed none, even by a
// host that always supplies them.
func TestUndeclaredInteractionsAreNotHanded(t *testing.T) {
	t.Parallel()
	tp, got := interactingProv()
	s, err := openWith(t, tp.validated(t), "s1", &person{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	if (*got)[0] != nil {
		t.Fatalf("the provider was handed %T", (*got)[0])
	}
	// No host interactions: none handed either.
	tp, got = interactingProv(provider.InteractionQuestion)
	s2 := open(t, tp.validated(t), "s2")
	defer s2.Close(t.Context(), "")
	if (*got)[0] != nil {
		t.Fatalf("the provider was handed %T without host interactions", (*got)[0])
	}
}

// Closing the session ends its interactions: one in flight has its
// context cancelled, and later ones are refused.
func TestInteractionsEndWithTheSession(t *testing.T) {
	t.Parallel()
	tp, got := interactingProv(provider.InteractionQuestion)
	p := &person{block: make(chan struct{}), blocked: make(chan struct{}, 1)}
	s, err := openWith(t, tp.validated(t), "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	ia := (*got)[0]
	done := make(chan error, 1)
	go func() {
		_, err := ia.Interact(t.Context(), "s1", question("i1"))
		done <- err
	}()
	<-p.blocked
	if err := s.Close(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
		t.Fatalf("the interaction in flight at close: %v", err)
	}
	if _, err := ia.Interact(t.Context(), "s1", question("i2")); !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
		t.Fatalf("an interaction after close: %v", err)
	}
}

// A rejected opening ends the interactions it was handed.
func TestInteractionsEndWhenTheOpeningIsRejected(t *testing.T) {
	t.Parallel()
	tp := newTprov()
	tp.caps.Interactions.Kinds = []provider.InteractionKind{provider.InteractionQuestion}
	var ia provider.Interactions
	tp.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		ia = req.Interactions
		// Asking during the opening is allowed...
		if _, err := ia.Interact(ctx, req.SessionID, question("during")); err != nil {
			return nil, err
		}
		_, s := tp.newSession(req.SessionID, "native-x", req.HostTools)
		return s, nil // ...but it never reports its binding
	}
	p := &person{answer: provider.InteractionReply{Answer: "ok"}}
	_, err := openWith(t, tp.validated(t), "s1", p)
	wantCode(t, err, provider.CodeBindingCallbackMissing)
	if _, err := ia.Interact(t.Context(), "s1", question("after")); !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
		t.Fatalf("an interaction after a rejected opening: %v", err)
	}
	if p.count() != 1 {
		t.Fatalf("the person was asked %d times", p.count())
	}
	// A failed opening ends them too.
	tp.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		ia = req.Interactions
		return nil, errors.New("no")
	}
	if _, err := openWith(t, tp.validated(t), "s2", p); err == nil {
		t.Fatal("the failing opening succeeded")
	}
	if _, err := ia.Interact(t.Context(), "s2", question("after")); !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
		t.Fatalf("an interaction after a failed opening: %v", err)
	}
}

func TestInteractionsInFlightAreBounded(t *testing.T) {
	t.Parallel()
	tp, got := interactingProv(provider.InteractionQuestion)
	p := &person{block: make(chan struct{}), blocked: make(chan struct{}, provider.MaxInteractionsInFlight)}
	s, err := openWith(t, tp.validated(t), "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	ia := (*got)[0]
	var wg sync.WaitGroup
	for i := range provider.MaxInteractionsInFlight {
		wg.Go(func() { ia.Interact(t.Context(), "s1", question(fmt.Sprint("held-", i))) })
	}
	for range provider.MaxInteractionsInFlight {
		<-p.blocked
	}
	if _, err := ia.Interact(t.Context(), "s1", question("one-too-many")); !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
		t.Fatalf("interaction %d: %v", provider.MaxInteractionsInFlight+1, err)
	}
	close(p.block)
	wg.Wait()
	s.Close(t.Context(), "")
}

// A host that fails or panics is an error for the provider, not a crash.
func TestInteractionHostFailures(t *testing.T) {
	t.Parallel()
	tp, got := interactingProv(provider.InteractionQuestion)
	p := &person{err: errors.New("nobody is there")}
	s, err := openWith(t, tp.validated(t), "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	ia := (*got)[0]
	if _, err := ia.Interact(t.Context(), "s1", question("a")); err == nil || err.Error() != "nobody is there" {
		t.Fatalf("a failing host: %v", err)
	}
	p.mu.Lock()
	p.err, p.panics = nil, true
	p.mu.Unlock()
	var pe *provider.PanicError
	if _, err := ia.Interact(t.Context(), "s1", question("b")); !errors.As(err, &pe) {
		t.Fatalf("a panicking host: %v", err)
	}
}

func TestInteractionCapabilities(t *testing.T) {
	t.Parallel()
	caps := fullCaps()
	caps.Interactions.Kinds = []provider.InteractionKind{provider.InteractionQuestion, provider.InteractionNotice}
	c, err := provider.CheckCapabilities(caps)
	if err != nil || c.Interactions.Kinds[0] != provider.InteractionNotice {
		t.Fatalf("kinds not normalised: %+v %v", c.Interactions, err)
	}
	if !caps.Equal(c) {
		t.Fatal("normalised capabilities differ")
	}
	for _, kinds := range [][]provider.InteractionKind{{"poll"}, {provider.InteractionNotice, provider.InteractionNotice}} {
		caps.Interactions.Kinds = kinds
		_, err := provider.CheckCapabilities(caps)
		wantCode(t, err, provider.CodeInvalidCapabilities)
	}
}

// The interaction checks: what they accept is within every bound, and the
// facade agrees with them (a well-formed interaction reaches the person,
// a malformed one is refused with the code).
func FuzzCheckInteraction(f *testing.F) {
	f.Add("i1", "question", "Which branch?", "main\x00dev", "main", false)
	f.Add("i2", "notice", "Done.\n\tAll tests pass.", "", "", false)
	f.Add("i3", "notice", "hi", "x", "", false)
	f.Add(" i4", "question", "hi", "", "", false)
	f.Add("i5", "question", "bell\a", "", "", false)
	f.Add("i6", "question", "abc\u202edef", "", "", false)
	f.Add("i7", "question", "pick", "a\x00a", "a", false)
	f.Add("i8", "question", "pick", "a\x00b", "c", false)
	f.Add("i9", "question", "pick", "a\x00b", "c", true)
	f.Add("i10", "poll", "pick", "", "", false)
	f.Add("i11", "question", strings.Repeat("é", 5000), "", "", false)
	f.Add("i12", "question", "pick", " a", "", false)
	f.Add("i13", "question", "pick", "", "\xff", false)
	tp, got := interactingProv(provider.InteractionQuestion, provider.InteractionNotice)
	p := &person{}
	v, err := provider.Validate(tp.caps, tp.adapter())
	if err != nil {
		f.Fatal(err)
	}
	req := createReq("fuzz")
	req.Interactions = p
	s, err := v.Create(context.Background(), req)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close(context.Background(), "") })
	ia := (*got)[0]
	var n sync.Mutex
	seq := 0
	f.Fuzz(func(t *testing.T, id, kind, message, options, answer string, declined bool) {
		in := provider.Interaction{ID: id, Kind: provider.InteractionKind(kind), Message: message}
		if options != "" {
			in.Options = strings.Split(options, "\x00")
		}
		checkErr := provider.CheckInteraction(in)
		if checkErr == nil {
			if len(in.Message) == 0 || len(in.Message) > provider.MaxInteractionMessageBytes || len(in.Options) > provider.MaxInteractionOptions {
				t.Fatalf("accepted out of bounds: %d bytes, %d options", len(in.Message), len(in.Options))
			}
			if in.Kind != provider.InteractionQuestion && len(in.Options) > 0 {
				t.Fatal("accepted options on a notice")
			}
		}
		reply := provider.InteractionReply{Answer: answer, Declined: declined}
		replyErr := provider.CheckInteractionReply(in, reply)
		p.mu.Lock()
		p.answer = reply
		p.mu.Unlock()
		n.Lock()
		seq++
		in.ID = fmt.Sprintf("%d-%s", seq, id) // a fresh id, so reuse is not what is tested
		n.Unlock()
		checkErr = provider.CheckInteraction(in)
		r, err := ia.Interact(context.Background(), "fuzz", in)
		switch {
		case checkErr != nil:
			if !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
				t.Fatalf("check says %v; the facade says %v", checkErr, err)
			}
		case replyErr != nil:
			if !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
				t.Fatalf("the reply check says %v; the facade says %v", replyErr, err)
			}
		case err != nil:
			t.Fatalf("a well-formed interaction was refused: %v", err)
		case in.Kind == provider.InteractionNotice && r != (provider.InteractionReply{}):
			t.Fatalf("a notice's reply %+v", r)
		case r.Declined && r.Answer != "":
			t.Fatal("a declined reply carries an answer")
		}
	})
}
