package host

import (
	"testing"
	"time"

	"github.com/agentry-dev/agentry/tool"
)

// The feed keeps a bounded replay per principal: a reconnect within it
// gets every notice it missed; one past it is told of the gap; ids are
// shared by principals without making gaps of each other's notices.
func TestFeedReplayIsBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFeed(now)
	alice, bob := tool.Identity{Tenant: "acme", Principal: "alice"}, tool.Identity{Tenant: "acme", Principal: "bob"}
	if !f.open(alice) || !f.open(bob) {
		t.Fatal("open refused")
	}
	_, _, start, _ := f.since(alice, 0)
	f.publish(alice, FeedConversation, map[string]int{"n": 0}, now)
	f.publish(bob, FeedConversation, map[string]int{"n": 0}, now) // an id alice never sees
	f.publish(alice, FeedConversation, map[string]int{"n": 1}, now)
	ns, gap, _, _ := f.since(alice, start)
	if gap || len(ns) != 2 || string(ns[1].data) != `{"n":1}` {
		t.Fatalf("since the start: %d notices, gap %v", len(ns), gap)
	}
	// Another principal's ids in between are not a gap.
	if ns, gap, _, _ := f.since(alice, ns[0].id); gap || len(ns) != 1 {
		t.Fatalf("since alice's first: %d notices, gap %v", len(ns), gap)
	}
	for i := range feedReplay {
		f.publish(alice, FeedConversation, map[string]int{"n": 2 + i}, now)
	}
	if _, gap, _, _ := f.since(alice, start); !gap {
		t.Fatal("a reconnect past the replay bound was not told of the gap")
	}
	ns, gap, newest, _ := f.since(alice, 0)
	if gap || len(ns) != feedReplay || ns[len(ns)-1].id != newest {
		t.Fatalf("kept %d notices (gap %v), want the last %d", len(ns), gap, feedReplay)
	}
	// A notice too large to send whole becomes a reset.
	f.publish(alice, FeedConversation, map[string]string{"x": string(make([]byte, feedNoticeMax))}, now)
	ns, _, _, _ = f.since(alice, newest)
	if len(ns) != 1 || ns[0].name != FeedReset {
		t.Fatalf("a huge notice went out as %q", ns[0].name)
	}
	for range feedStreams - 1 {
		if !f.open(alice) {
			t.Fatal("refused within the bound")
		}
	}
	if f.open(alice) {
		t.Fatal("a stream past the bound was admitted")
	}
	f.close(alice)
	if !f.open(alice) {
		t.Fatal("a closed stream's place was not given back")
	}
}

// Principals without a stream are forgotten past the bound, coldest
// first; their next reconnect is a gap.
func TestFeedForgetsColdPrincipals(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFeed(now)
	cold := tool.Identity{Tenant: "acme", Principal: "cold"}
	f.publish(cold, FeedConversation, 1, now)
	_, _, last, _ := f.since(cold, 0)
	for i := range feedPrincipals {
		f.publish(tool.Identity{Tenant: "t", Principal: string(rune('a'+i%26)) + time.Duration(i).String()}, FeedConversation, 1, now.Add(time.Second))
	}
	if len(f.of) > feedPrincipals {
		t.Fatalf("%d principals kept", len(f.of))
	}
	f.open(cold)
	if _, gap, _, _ := f.since(cold, last); !gap {
		t.Fatal("a forgotten principal's reconnect was not told of the gap")
	}
}

// Notices of a principal that has no stream open, and had none since its
// feed was forgotten, are not made; a reconnect from before them is told
// of the gap, and a principal with a stream hears every notice.
func TestFeedKeepsOnlyHeardPrincipals(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFeed(now)
	alice, bob := tool.Identity{Tenant: "acme", Principal: "alice"}, tool.Identity{Tenant: "acme", Principal: "bob"}
	if f.heard(bob) {
		t.Fatal("a principal that never opened a stream is heard")
	}
	if len(f.of) != 0 {
		t.Fatalf("%d feeds kept for principals without a stream", len(f.of))
	}
	if !f.open(alice) {
		t.Fatal("open refused")
	}
	_, _, start, _ := f.since(alice, 0)
	if !f.heard(alice) {
		t.Fatal("a principal with a stream open is not heard")
	}
	f.publish(alice, FeedConversation, map[string]int{"n": 1}, now)
	f.close(alice)
	// alice's stream is closed but her feed is kept: she hears what she
	// missed on reconnecting.
	if !f.heard(alice) {
		t.Fatal("a principal whose stream closed is no longer heard")
	}
	f.publish(alice, FeedConversation, map[string]int{"n": 2}, now)
	if ns, gap, _, _ := f.since(alice, start); gap || len(ns) != 2 || string(ns[1].data) != `{"n":2}` {
		t.Fatalf("reconnecting: %d notices, gap %v", len(ns), gap)
	}
	// Once forgotten, a notice of hers is not made, and her reconnect is a gap.
	_, _, last, _ := f.since(alice, 0)
	delete(f.of, alice)
	if f.heard(alice) {
		t.Fatal("a forgotten principal is heard")
	}
	f.open(alice)
	if _, gap, _, _ := f.since(alice, last); !gap {
		t.Fatal("a reconnect past a notice that was not made was not told of the gap")
	}
}
