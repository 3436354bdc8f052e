package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
)

// feedStream is one open GET /v1/events, read event by event.
type feedStream struct {
	t      *testing.T
	res    *http.Response
	cancel context.CancelFunc
	ev     chan sseEvent
	done   chan struct{}
}

func (f *fixture) follow(who, lastID string) *feedStream {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.tokens[who])
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		f.t.Fatalf("GET /v1/events: %v", err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		res.Body.Close()
		f.t.Fatalf("GET /v1/events: %d", res.StatusCode)
	}
	s := &feedStream{t: f.t, res: res, cancel: cancel, ev: make(chan sseEvent, 64), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.ev)
		var cur sseEvent
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.name != "" {
					s.ev <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.data = append(cur.data, line[6:]...)
			}
		}
	}()
	f.t.Cleanup(s.close)
	return s
}

func (s *feedStream) close() {
	s.cancel()
	s.res.Body.Close()
	for range s.ev {
	}
	<-s.done
}

// next returns the next event, failing past a bound.
func (s *feedStream) next() sseEvent {
	s.t.Helper()
	select {
	case e, ok := <-s.ev:
		if !ok {
			s.t.Fatal("the feed ended")
		}
		return e
	case <-time.After(10 * time.Second):
		s.t.Fatal("no event on the feed within 10 s")
	}
	return sseEvent{}
}

// until returns the first conversation notice of id that ok accepts,
// skipping others.
func (s *feedStream) until(id string, ok func(v feedConv) bool) (sseEvent, feedConv) {
	s.t.Helper()
	for {
		e := s.next()
		if e.name != host.FeedConversation {
			continue
		}
		var v feedConv
		if err := json.Unmarshal(e.data, &v); err != nil {
			s.t.Fatalf("a conversation notice is not JSON: %v: %s", err, e.data)
		}
		if v.SessionID == id && ok(v) {
			return e, v
		}
	}
}

type feedConv struct {
	SessionID string `json:"sessionId"`
	State     string `json:"state"`
	Turns     int    `json:"turns"`
	Running   bool   `json:"running"`
	Pending   *struct {
		Question, Tool string
	} `json:"pending"`
}

// A person's feed tells, as it happens, every change of their
// conversations made anywhere (here: plain API calls, as another tab or
// a script would make them): opened, a turn running, paused on a
// check-in, answered, closed. Another person's feed hears none of it.
func TestEventsFeedFollowsConversations(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		f := newFixture(t, config{kind: kind})
		want(t, f.do("GET", "/v1/events", "", nil), 401, "unauthenticated")
		a := f.follow("alice", "")
		if e := a.next(); e.name != host.FeedReady || e.id == "" {
			t.Fatalf("the feed opens with %q (id %q), want ready with an id", e.name, e.id)
		}
		b := f.follow("bob", "")
		b.next() // ready

		id := f.open("alice")
		a.until(id, func(v feedConv) bool { return v.State == "open" && !v.Running })
		want(t, f.say("alice", id, f.askPrompt()), http.StatusAccepted, "")
		a.until(id, func(v feedConv) bool { return v.Running })
		_, v := a.until(id, func(v feedConv) bool { return !v.Running })
		if v.State != "paused" || v.Pending == nil || v.Pending.Question == "" {
			t.Fatalf("after the check-in the feed says %+v", v)
		}
		want(t, f.decide("alice", id, true), http.StatusOK, "")
		_, v = a.until(id, func(v feedConv) bool { return !v.Running })
		if v.State != "open" || v.Pending != nil || v.Turns != 1 {
			t.Fatalf("after the decision the feed says %+v", v)
		}
		want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), http.StatusNoContent, "")
		a.until(id, func(v feedConv) bool { return v.State == "closed" })

		// Bob's feed heard nothing of alice's conversation.
		bobID := f.open("bob")
		e, _ := b.until(bobID, func(feedConv) bool { return true })
		if strings.Contains(string(e.data), id) {
			t.Fatalf("bob's feed names alice's conversation: %s", e.data)
		}
		select {
		case e := <-b.ev:
			t.Fatalf("bob's feed says more: %s %s", e.name, e.data)
		default:
		}
	})
}

// A client that reconnects with Last-Event-ID is sent what it missed, in
// order; one whose id this host did not give is told to reload (reset),
// never left with a silent gap; a malformed id is refused.
func TestEventsFeedResumesWithLastEventID(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	a := f.follow("alice", "")
	ready := a.next()
	first := f.open("alice")
	e, _ := a.until(first, func(feedConv) bool { return true })
	a.close()

	// Meanwhile: two more conversations, one closed.
	second, third := f.open("alice"), f.open("alice")
	want(t, f.do("DELETE", "/v1/sessions/"+second, "alice", nil), http.StatusNoContent, "")

	r := f.follow("alice", e.id)
	if e := r.next(); e.name != host.FeedReady || !strings.Contains(string(e.data), `"resumed":true`) {
		t.Fatalf("a resumed feed opens with %s %s", e.name, e.data)
	}
	var got []string
	for len(got) < 3 {
		var v feedConv
		e := r.next()
		if err := json.Unmarshal(e.data, &v); err != nil || e.name != host.FeedConversation {
			t.Fatalf("missed notice %s %s", e.name, e.data)
		}
		got = append(got, v.SessionID+" "+v.State)
	}
	if strings.Join(got, ",") != second+" open,"+third+" open,"+second+" closed" {
		t.Fatalf("the missed notices: %q", got)
	}

	// An id older than the feed (as after a restart of the host) and one
	// from the future: reset.
	for _, old := range []string{"1", "99999999999999999"} {
		s := f.follow("alice", old)
		if e := s.next(); e.name != host.FeedReset || e.id == "" {
			t.Fatalf("Last-Event-ID %s: the feed opens with %s %s (id %q), want reset", old, e.name, e.data, e.id)
		}
		s.close()
	}
	_ = ready
	want(t, f.do("GET", "/v1/events", "alice", nil, "Last-Event-ID", "abc"), http.StatusBadRequest, "invalid_field")
}

// A person may hold a bounded number of streams; past it, 429.
func TestEventsFeedBoundsStreams(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	for range 8 {
		f.follow("alice", "").next()
	}
	r := f.do("GET", "/v1/events", "alice", nil)
	want(t, r, http.StatusTooManyRequests, "too_many_streams")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	f.follow("bob", "").next() // another person's bound is their own
}

// Shutdown ends every open stream (it does not wait for clients).
func TestEventsFeedEndsAtShutdown(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	s := f.follow("alice", "")
	s.next()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-s.ev:
		if ok {
			for range s.ev {
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived the shutdown")
	}
}
