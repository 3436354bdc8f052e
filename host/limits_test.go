package host_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
)

// stalled starts a request on a raw connection to srv, asking to continue
// (Expect: 100-continue), and waits until the host's handler reads its
// body (the server then sends 100 Continue): from there the request is in
// flight in the host. It sends part of the body and then nothing more.
func stalled(t *testing.T, srv string, method, path, token, ctype string, length int, part string) (net.Conn, *bufio.Reader) {
	t.Helper()
	u, _ := url.Parse(srv)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a bound on the test, not a wait
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
		method, path, u.Host, token, ctype, length)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("waiting for 100 Continue: %q %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after it
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(part)); err != nil {
		t.Fatal(err)
	}
	return c, br
}

// answerOf reads the response on a stalled request's connection.
func answerOf(t *testing.T, br *bufio.Reader) (*http.Response, map[string]any) {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res, m
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// A body slower than the floor is cut with 408 body_too_slow within one
// window, whatever it still had to send (a workspace upload is held to
// the same floor by the same reader). A body that keeps the pace is taken, and a turn that runs
// longer than the window after its body was read is not cut.
func TestSlowBodyIsCut(t *testing.T) {
	f := newFixture(t, config{opt: host.Options{BodyMinRate: 1000, BodyRateWindow: 300 * time.Millisecond}})
	srv := httptest.NewServer(f.h) // the host itself: the fixture's checker reads bodies ahead of it
	defer srv.Close()
	id := f.open("alice")

	for _, c := range []struct{ method, path, ctype string }{
		{"POST", "/v1/sessions/" + id + "/turns", "application/json"},
		{"POST", "/v1/sessions", "application/json"},
	} {
		began := time.Now()
		_, br := stalled(t, srv.URL, c.method, c.path, f.tokens["alice"], c.ctype, 1<<20, `{"message":`)
		res, m := answerOf(t, br)
		if res.StatusCode != http.StatusRequestTimeout || errCode(m) != "body_too_slow" {
			t.Fatalf("%s %s: %d %v", c.method, c.path, res.StatusCode, m)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("cut after %s; the window is 300ms", took)
		}
	}

	// The pace kept: a turn whose body came at once, then ran past the
	// window (the gate holds it), answers; its request was not cut.
	done := make(chan resp, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/sessions/"+id+"/turns", strings.NewReader(`{"message":"call gate {}"}`))
		req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- resp{status: -1, body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(res.Body).WriteTo(&b)
		done <- resp{status: res.StatusCode, body: []byte(b.String())}
	}()
	<-f.gate.entered
	// Time itself is what is tested here: the connection's deadline is
	// wall-clock, and the turn must outlast three windows of it.
	time.Sleep(time.Second)
	f.gate.release <- struct{}{}
	if r := <-done; r.status != http.StatusOK || !strings.Contains(string(r.body), "released") {
		t.Fatalf("the held turn: %d %s", r.status, r.body)
	}
}

// A principal's requests in flight are capped: past the bound, 429
// too_many_requests with Retry-After; another principal is served
// meanwhile, and once one is answered the principal is served again.
func TestRequestsInFlightPerPrincipal(t *testing.T) {
	f := newFixture(t, config{opt: host.Options{MaxRequestsPerPrincipal: 2}})
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	id := f.open("alice")
	body := `{"message":"hello"}`
	var held []net.Conn
	var readers []*bufio.Reader
	for range 2 {
		c, br := stalled(t, srv.URL, "POST", "/v1/sessions/"+id+"/turns", f.tokens["alice"], "application/json", len(body), "")
		held, readers = append(held, c), append(readers, br)
	}
	r := f.do("GET", "/v1/sessions", "alice", nil)
	want(t, r, http.StatusTooManyRequests, "too_many_requests")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	want(t, f.do("GET", "/v1/sessions", "bob", nil), http.StatusOK, "")

	// One held request completes and is answered: room again.
	if _, err := held[0].Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if res, m := answerOf(t, readers[0]); res.StatusCode != http.StatusOK {
		t.Fatalf("the held turn: %d %v", res.StatusCode, m)
	}
	want(t, f.do("GET", "/v1/sessions", "alice", nil), http.StatusOK, "")
}

// Opening conversations is rate-limited per principal by a token bucket
// on the host's clock: the burst, then 429 rate_limited with the
// Retry-After until the next token; another principal is not slowed.
func TestConversationCreationRate(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := newFixture(t, config{opt: host.Options{MaxCreatesPerMinute: 3, Now: clk.Now}})
	for range 3 {
		f.open("alice")
	}
	r := f.do("POST", "/v1/sessions", "alice", nil)
	want(t, r, http.StatusTooManyRequests, "rate_limited")
	if ra := r.header.Get("Retry-After"); ra != "20" {
		t.Fatalf("Retry-After %q; one token comes every 20 s at 3 a minute", ra)
	}
	f.open("bob")
	clk.advance(19 * time.Second)
	want(t, f.do("POST", "/v1/sessions", "alice", nil), http.StatusTooManyRequests, "rate_limited")
	clk.advance(time.Second)
	f.open("alice")
	refused := f.rec.ofType(host.TypeAdmissionRefused)
	if len(refused) != 2 || refused[0].Payload.(*host.AdmissionRefused).Limit != "creation_rate" {
		t.Fatalf("admission_refused events: %+v", refused)
	}
}
