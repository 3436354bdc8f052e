package host

import (
	"testing"

	"github.com/agentry-dev/agentry/tool"

	"github.com/agentry-dev/agentry/event"
)

// A stream that is not read keeps at most maxQueued events and counts the
// rest, so a slow client costs bounded memory and is told what it lost.
func TestSubscriptionBound(t *testing.T) {
	r := NewEventSink()
	s := r.subscribe("ses_x")
	for i := range maxQueued + 10 {
		r.Export(event.Event{Type: tool.TypeCallStart, Meta: event.Meta{SessionID: "ses_x", Seq: uint64(i + 1)}})
	}
	r.Export(event.Event{Type: tool.TypeCallStart, Meta: event.Meta{SessionID: "ses_other", Seq: 1}})
	got, dropped := s.take(nil)
	if len(got) != maxQueued || dropped != 10 || got[0].e.Meta.Seq != 1 {
		t.Fatalf("%d queued, %d dropped", len(got), dropped)
	}
	r.Export(event.Event{Type: tool.TypeCallEnd, Meta: event.Meta{SessionID: "ses_x"}})
	if got, dropped = s.take(got); len(got) != 1 || dropped != 0 {
		t.Fatalf("after a take: %d queued, %d dropped", len(got), dropped)
	}
	r.unsubscribe("ses_x", s)
	r.Export(event.Event{Type: tool.TypeCallEnd, Meta: event.Meta{SessionID: "ses_x"}})
	if got, _ = s.take(got); len(got) != 0 {
		t.Fatal("an unsubscribed stream still receives")
	}
}

func TestSessionIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newSessionID()
		if !validSessionID(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "ses_", "ses_XYZ", "ses_" + "0123456789abcdef0123456789abcde", "ses_0123456789ABCDEF0123456789abcdef", "../ses_0123456789abcdef0123456789abcd"} {
		if validSessionID(bad) {
			t.Fatalf("accepted %q", bad)
		}
	}
}
