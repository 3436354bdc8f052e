package acp_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// person is the host's session interactions: it records what it is asked
// and answers with answer (or declines, or waits for the context).
type person struct {
	answer func(ctx context.Context, in provider.Interaction) (provider.InteractionReply, error)

	mu     sync.Mutex
	asked  []provider.Interaction
	asking chan struct{} // closed at the first question, when set
}

func (p *person) Interact(ctx context.Context, sessionID string, in provider.Interaction) (provider.InteractionReply, error) {
	p.mu.Lock()
	p.asked = append(p.asked, in)
	if p.asking != nil {
		close(p.asking)
		p.asking = nil
	}
	p.mu.Unlock()
	return p.answer(ctx, in)
}

func (p *person) questions() []provider.Interaction {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asked)
}

func answering(a string) *person {
	return &person{answer: func(context.Context, provider.Interaction) (provider.InteractionReply, error) {
		return provider.InteractionReply{Answer: a}, nil
	}}
}

func (r *rig) createWith(inst *provider.Instance, id string, ia provider.Interactions) *provider.ValidatedSession {
	r.t.Helper()
	s, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: id, WorkingDirectory: r.ws, Interactions: ia})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = s.Close(context.Background(), provider.CloseRequested) })
	return s
}

func (r *rig) elicitations() []*acp.ElicitationEvent {
	var out []*acp.ElicitationEvent
	for _, e := range r.events.of(acp.TypeElicitation) {
		out = append(out, e.Payload.(*acp.ElicitationEvent))
	}
	return out
}

func TestElicitationFormIsAskedAsAQuestion(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	p := answering("notes.md")
	s := r.createWith(r.instance(r.config(nil, nil)), "s1", p)
	if got := said(turn(t, s, "t1", "elicit")); got != `accepted {"name":"notes.md"}` {
		t.Fatalf("the agent heard %q", got)
	}
	if got := said(turn(t, s, "t2", "elicit Again?")); got != `accepted {"name":"notes.md"}` {
		t.Fatalf("the second elicitation: the agent heard %q", got)
	}
	qs := p.questions()
	if len(qs) != 2 || qs[0].Kind != provider.InteractionQuestion || len(qs[0].Options) != 0 {
		t.Fatalf("asked %+v", qs)
	}
	if !strings.Contains(qs[0].Message, "What should I call the file?") || !strings.Contains(qs[0].Message, "a file name") {
		t.Fatalf("the question reads %q; want the agent's message and the field's description", qs[0].Message)
	}
	if qs[0].ID == qs[1].ID {
		t.Fatalf("two elicitations share the interaction id %q", qs[0].ID)
	}
	evs := r.elicitations()
	if len(evs) != 2 || evs[0].Mode != "form" || evs[0].Outcome != "accepted" || evs[0].InteractionID != qs[0].ID || evs[0].Fields != 1 {
		t.Fatalf("elicitation events %+v", evs)
	}
}

func TestElicitationChoiceOffersOptions(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	p := &person{answer: func(_ context.Context, in provider.Interaction) (provider.InteractionReply, error) {
		return provider.InteractionReply{Answer: in.Options[len(in.Options)-1]}, nil
	}}
	s := r.createWith(r.instance(r.config(nil, nil)), "s1", p)
	if got := said(turn(t, s, "t1", "elicit-enum")); got != `accepted {"colour":"blue"}` {
		t.Fatalf("enum: the agent heard %q", got)
	}
	if got := said(turn(t, s, "t2", "elicit-oneof")); got != `accepted {"colour":"green"}` {
		t.Fatalf("oneOf: the agent heard %q", got)
	}
	qs := p.questions()
	if len(qs) != 2 || !slices.Equal(qs[0].Options, []string{"red", "green", "blue"}) || !slices.Equal(qs[1].Options, []string{"red", "green"}) {
		t.Fatalf("asked %+v", qs)
	}
	if !strings.Contains(qs[0].Message, "Colour") {
		t.Fatalf("the question %q does not name the field's title", qs[0].Message)
	}
	if evs := r.elicitations(); len(evs) != 2 || evs[0].Options != 3 {
		t.Fatalf("elicitation events %+v", evs)
	}
}

func TestElicitationDeclined(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	p := &person{answer: func(context.Context, provider.Interaction) (provider.InteractionReply, error) {
		return provider.InteractionReply{Declined: true}, nil
	}}
	s := r.createWith(r.instance(r.config(nil, nil)), "s1", p)
	if got := said(turn(t, s, "t1", "elicit")); got != "declined" {
		t.Fatalf("the agent heard %q", got)
	}
	if got := said(turn(t, s, "t2", "elicit-url")); got != "declined" {
		t.Fatalf("url: the agent heard %q", got)
	}
	if evs := r.elicitations(); len(evs) != 2 || evs[0].Outcome != "declined" || evs[0].Reason != "" {
		t.Fatalf("elicitation events %+v", evs)
	}
}

func TestElicitationURLNamesTheURL(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	p := answering("done")
	s := r.createWith(r.instance(r.config(nil, nil)), "s1", p)
	if got := said(turn(t, s, "t1", "elicit-url")); got != "accepted null" {
		t.Fatalf("the agent heard %q", got)
	}
	qs := p.questions()
	if len(qs) != 1 || len(qs[0].Options) != 0 || !strings.Contains(qs[0].Message, "https://example.test/login?code=42") ||
		!strings.Contains(qs[0].Message, "Sign in to continue.") {
		t.Fatalf("asked %+v", qs)
	}
	if evs := r.elicitations(); len(evs) != 1 || evs[0].Mode != "url" || evs[0].Outcome != "accepted" {
		t.Fatalf("elicitation events %+v", evs)
	}
}

func TestElicitationRicherThanAQuestionIsDeclinedWithAReason(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	p := answering("never")
	s := r.createWith(r.instance(r.config(nil, nil)), "s1", p)
	if got := said(turn(t, s, "t1", "elicit-rich")); got != "declined" {
		t.Fatalf("the agent heard %q", got)
	}
	if len(p.questions()) != 0 {
		t.Fatal("a form of two fields reached the person")
	}
	evs := r.elicitations()
	if len(evs) != 1 || evs[0].Outcome != "declined" || !strings.Contains(evs[0].Reason, "2 fields") || evs[0].InteractionID != "" {
		t.Fatalf("elicitation events %+v", evs)
	}
}

func TestElicitationWithoutInteractionsIsDeclined(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	if got := said(turn(t, s, "t1", "elicit")); got != "declined" {
		t.Fatalf("the agent heard %q", got)
	}
	if evs := r.elicitations(); len(evs) != 1 || !strings.Contains(evs[0].Reason, "no session interactions") {
		t.Fatalf("elicitation events %+v", evs)
	}
}

func TestElicitationIsCancelledWhenTheSessionCloses(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ended := make(chan struct{})
	p := &person{asking: make(chan struct{}), answer: func(ctx context.Context, _ provider.Interaction) (provider.InteractionReply, error) {
		<-ctx.Done()
		close(ended)
		return provider.InteractionReply{}, ctx.Err()
	}}
	asking := p.asking
	s := r.createWith(r.instance(r.config(nil, nil)), "s1", p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = tryTurn(s, "t1", "elicit")
	}()
	<-asking
	if err := s.Close(context.Background(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	<-ended
	<-done
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	evs := r.events.await(ctx, acp.TypeElicitation, 1)
	if len(evs) != 1 || evs[0].Payload.(*acp.ElicitationEvent).Outcome != "cancelled" {
		t.Fatalf("elicitation events %+v", evs)
	}
}
