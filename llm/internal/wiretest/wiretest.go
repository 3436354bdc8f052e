// Package wiretest is the test bench of the model adapters: a local HTTP
// server that replays the answers a test queues (JSON bodies, error
// bodies with their headers, server-sent event streams written in pieces)
// and records what the client sent; golden files for request bodies; and
// a sleeper that records the waits instead of sleeping.
//
// It serves only loopback addresses and never reaches the internet.
package wiretest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of request bodies")

// Reply is one answer of the server.
type Reply struct {
	Status int               // 0 means 200
	Header map[string]string // added to the response
	// Body is sent as is: JSON, or an event stream when Stream is set.
	Body string
	// Stream sends Body as text/event-stream, one event at a time with a
	// flush after each; with Split > 0, in pieces of Split bytes instead,
	// so events and even lines arrive cut in two.
	Stream bool
	Split  int
	// Hold keeps the response open after Body until the client goes away:
	// the server then signals Held, and Gone once the client left.
	Hold bool
}

// Request is what the client sent.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// JSON decodes the body into a generic value (failing the test if it is
// not JSON).
func (r Request) JSON(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, r.Body)
	}
	return v
}

// Server is a local model server that replays queued replies.
type Server struct {
	*httptest.Server
	// Check, when set, inspects every request as the vendor would and may
	// refuse it with a status and body, as the vendor does.
	Check func(r Request) (status int, body string)
	// Held receives once per Hold reply when its body has been written;
	// Gone receives when that client has gone.
	Held, Gone chan struct{}

	t       testing.TB
	mu      sync.Mutex
	replies []Reply
	seen    []Request
}

// New starts a server; it closes when the test ends.
func New(t testing.TB) *Server {
	s := &Server{t: t, Held: make(chan struct{}, 16), Gone: make(chan struct{}, 16)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Queue adds replies, answered in order.
func (s *Server) Queue(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, r...)
}

// Requests returns what the server received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}

// Pending is how many queued replies were not used.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.replies)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	_, _ = body.ReadFrom(r.Body)
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body.Bytes()}
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()
	if s.Check != nil {
		if status, msg := s.Check(req); status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(msg))
			return
		}
	}
	s.mu.Lock()
	if len(s.replies) == 0 {
		s.mu.Unlock()
		s.t.Errorf("wiretest: request %s %s with no reply queued", r.Method, r.URL.Path)
		http.Error(w, `{"error":{"message":"no reply queued"}}`, http.StatusInternalServerError)
		return
	}
	rep := s.replies[0]
	s.replies = s.replies[1:]
	s.mu.Unlock()

	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		if rep.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	switch {
	case rep.Stream && rep.Split > 0:
		for b := []byte(rep.Body); len(b) > 0; {
			n := min(rep.Split, len(b))
			_, _ = w.Write(b[:n])
			flush()
			b = b[n:]
		}
	case rep.Stream:
		for _, ev := range strings.SplitAfter(rep.Body, "\n\n") {
			_, _ = w.Write([]byte(ev))
			flush()
		}
	default:
		_, _ = w.Write([]byte(rep.Body))
	}
	if rep.Hold {
		flush()
		s.Held <- struct{}{}
		<-r.Context().Done()
		s.Gone <- struct{}{}
	}
}

// Wait receives from ch or fails the test after a generous bound (a
// guard against a hung test, not a timing assumption).
func Wait(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Golden compares a JSON request body with testdata/<name>.golden, after
// putting both in one canonical form (keys sorted, indented). With
// -update it rewrites the file instead.
func Golden(t testing.TB, name string, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("golden %s: body is not JSON: %v", name, err)
	}
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run the test with -update to create it)", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("request body differs from %s (run with -update if the change is intended)\n got: %s\nwant: %s", path, got, want)
	}
}

// Sleeper records the waits it is asked for and returns at once (or with
// ctx's error when ctx has ended).
type Sleeper struct {
	mu    sync.Mutex
	waits []time.Duration
}

// Sleep is the function to inject.
func (s *Sleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

// Waits returns the waits asked for so far.
func (s *Sleeper) Waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// Fixture reads testdata/<name>.
func Fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ClosedURL returns a loopback http URL on which nothing listens, for
// tests of a refused connection.
func ClosedURL(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}
