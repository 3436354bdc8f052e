package host_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// A closed conversation is kept RetainClosed on the host's clock, then
// the sweep removes it (its transcript and turn log with it; GET is 404,
// and DropWorkspace is called for it again) and keeps its usage; open
// conversations and recently closed ones stay.
func TestRetentionOfClosedConversations(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	var mu sync.Mutex
	var dropped []string
	drop := func(o tool.Identity, id string) error {
		mu.Lock()
		defer mu.Unlock()
		dropped = append(dropped, o.Principal+"/"+id)
		return nil
	}
	f := newFixture(t, config{opt: host.Options{RetainClosed: 24 * time.Hour, RetentionEvery: -1, Now: clk.Now, DropWorkspace: drop}})
	old, kept := f.open("alice"), f.open("alice")
	want(t, f.say("alice", old, "hello"), http.StatusOK, "")
	want(t, f.do("DELETE", "/v1/sessions/"+old, "alice", nil), http.StatusNoContent, "")
	clk.advance(23 * time.Hour)
	recent := f.open("alice")
	want(t, f.do("DELETE", "/v1/sessions/"+recent, "alice", nil), http.StatusNoContent, "")

	mu.Lock()
	dropped = nil // the closes'
	mu.Unlock()
	if n, err := f.h.SweepClosed(context.Background()); err != nil || n != 0 {
		t.Fatalf("a sweep before the day is out: %d %v", n, err)
	}
	clk.advance(2 * time.Hour)
	if n, err := f.h.SweepClosed(context.Background()); err != nil || n != 1 {
		t.Fatalf("the sweep: %d %v, want the one closed 25 h ago", n, err)
	}
	// What the close left of its workspace goes with it.
	mu.Lock()
	if len(dropped) != 1 || dropped[0] != "alice/"+old {
		t.Errorf("the sweep dropped the workspaces of %v; want alice's swept conversation only", dropped)
	}
	mu.Unlock()
	want(t, f.do("GET", "/v1/sessions/"+old, "alice", nil), http.StatusNotFound, "not_found")
	want(t, f.do("GET", "/v1/sessions/"+old+"/messages", "alice", nil), http.StatusNotFound, "not_found")
	want(t, f.do("GET", "/v1/sessions/"+kept, "alice", nil), http.StatusOK, "")
	want(t, f.do("GET", "/v1/sessions/"+recent, "alice", nil), http.StatusOK, "")
	us, err := f.store.UsageRecords(context.Background(), host.UsageQuery{Tenant: "acme", Principal: "alice"})
	if err != nil || len(us) != 1 || us[0].Conversation != old {
		t.Fatalf("the swept conversation's usage: %+v %v", us, err)
	}
	swept := f.rec.ofType(host.TypeConversationsSwept)
	if len(swept) != 1 || swept[0].Payload.(*host.SweepEvent).Removed != 1 {
		t.Fatalf("sessions_swept events: %+v", swept)
	}
}

// The sweep runs by itself every RetentionEvery, and stops with the host.
func TestRetentionSweepsInTheBackground(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := newFixture(t, config{opt: host.Options{RetainClosed: time.Hour, RetentionEvery: 20 * time.Millisecond, Now: clk.Now}})
	id := f.open("alice")
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), http.StatusNoContent, "")
	clk.advance(2 * time.Hour)
	f.rec.waitFor(t, host.TypeConversationsSwept, func(event.Event) bool { return true }, 30*time.Second)
	want(t, f.do("GET", "/v1/sessions/"+id, "alice", nil), http.StatusNotFound, "not_found")
}
