package host_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
)

// The console's files are served without a token (they hold no data),
// with the console's strict policy, their types, and ETags a browser can
// revalidate.
func TestConsoleServesEmbeddedFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	for _, c := range []struct{ path, ctype, body string }{
		{"/", "text/html; charset=utf-8", `<script type="module" src="/console/app.js"></script>`},
		{"/console/app.js", "text/javascript; charset=utf-8", "/v1/sessions"},
		{"/console/api.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"/console/style.css", "text/css; charset=utf-8", "@media (max-width"},
		{"/console/icon.svg", "image/svg+xml", "<svg"},
	} {
		r := f.do("GET", c.path, "", nil)
		if r.status != 200 || r.header.Get("Content-Type") != c.ctype || !strings.Contains(string(r.body), c.body) {
			t.Fatalf("GET %s: %d %q, %.200s", c.path, r.status, r.header.Get("Content-Type"), r.body)
		}
		csp := r.header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'none'", "require-trusted-types-for 'script'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("GET %s: the policy %q lacks %s", c.path, csp, d)
			}
		}
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "*") {
			t.Errorf("GET %s: the policy allows too much: %q", c.path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", c.path, r.header)
		}
		etag := r.header.Get("ETag")
		if etag == "" {
			t.Fatalf("GET %s: no ETag", c.path)
		}
		if again := f.do("GET", c.path, "", nil, "If-None-Match", etag); again.status != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d", c.path, again.status)
		}
	}
	want(t, f.do("GET", "/console/nope.js", "", nil), 404, "not_found")
	want(t, f.do("GET", "/console/../host.go", "", nil), 404, "not_found")
	want(t, f.do("GET", "/index.html", "", nil), 404, "not_found")
	// A HEAD is a GET without the body.
	if r := f.do("HEAD", "/", "", nil); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("HEAD /: %d %d bytes", r.status, len(r.body))
	}
	want(t, f.do("POST", "/", "", nil), 404, "not_found")
}

// The files obey their policy by construction: no inline script or
// style, no event-handler attributes, no HTML parsed from strings, only
// same-origin references; and the token goes nowhere but sessionStorage
// and the Authorization header.
func TestConsoleFilesKeepThePolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	page := string(f.do("GET", "/", "", nil).body)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`),                           // a script with a body
		regexp.MustCompile(`(?i)<script(?:(?:\s(?:type|async|defer)(?:="[^"]*")?)*)\s*>`), // a script without src
		regexp.MustCompile(`(?i)<style`),
		regexp.MustCompile(`(?i)\sstyle=`),
		regexp.MustCompile(`(?i)\son[a-z]+=`),
		regexp.MustCompile(`(?i)javascript:`),
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("index.html has %q, which the policy refuses", m)
		}
	}
	for _, ref := range regexp.MustCompile(`(?i)\s(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(ref[1], "/console/") {
			t.Errorf("index.html refers to %q, outside the console's own files", ref[1])
		}
	}
	for _, name := range []string{"app.js", "api.js"} {
		js := string(f.do("GET", "/console/"+name, "", nil).body)
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage", "console.log", "EventSource", "setAttribute(\"style\"", "?token", "&token"} {
			if strings.Contains(js, bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
	}
}

// Every answer carries nosniff and a policy; the API's forbids rendering
// and framing, the 401 included.
func TestConsoleAPIHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	for _, c := range []struct{ method, path, who string }{
		{"GET", "/v1/sessions", "alice"},
		{"GET", "/v1/sessions", ""},
		{"GET", "/v1/nothing", "alice"},
		{"GET", "/healthz", ""},
		{"GET", "/nothing", ""},
	} {
		r := f.do(c.method, c.path, c.who, nil)
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s %s: policy %q", c.method, c.path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s: headers %v", c.method, c.path, r.header)
		}
	}
	// A streamed turn too.
	id := f.open("alice")
	r := f.do("POST", "/v1/sessions/"+id+"/turns", "alice", map[string]string{"message": "hi"}, "Accept", "text/event-stream")
	if r.header.Get("Content-Type") != "text/event-stream" || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("a stream's headers: %v", r.header)
	}
}

func TestConsoleMe(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	r := f.do("GET", "/v1/me", "carol", nil)
	want(t, r, 200, "")
	if m := r.json(t); m["tenant"] != "globex" || m["principal"] != "alice" {
		t.Fatalf("/v1/me: %s", r.body)
	}
	want(t, f.do("GET", "/v1/me", "", nil), 401, "unauthenticated")
	want(t, f.do("GET", "/v1/me", "agt_nope", nil), 401, "invalid_token")
	want(t, f.do("POST", "/v1/me", "alice", nil), 405, "method_not_allowed")
}

type toolSessions struct {
	Live, Closed []struct {
		Tool, Scope, KeyHash, RunnerID, Label, Reason string
		Calls                                         int
		Live                                          bool
		HeldMs                                        float64
		StartedAt                                     time.Time
	}
}

// A conversation's tool sessions: live ones with their key hash, runner,
// calls and how long they have been held (on the host's clock), then
// closed ones with their reason. Another principal's conversation is a
// 404, as everywhere in the API.
func TestConsoleToolSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{opt: host.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }}})
	id := f.open("alice")
	get := func() toolSessions {
		t.Helper()
		r := f.do("GET", "/v1/sessions/"+id+"/tool-sessions", "alice", nil)
		want(t, r, 200, "")
		var ts toolSessions
		if err := json.Unmarshal(r.body, &ts); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	if ts := get(); len(ts.Live) != 0 || len(ts.Closed) != 0 {
		t.Fatalf("a new conversation: %+v", ts)
	}
	want(t, f.say("alice", id, `call files {"op":"write","name":"a","text":"x"}`), 200, "")
	want(t, f.say("alice", id, `call files {"op":"read","name":"a"}`), 200, "")
	ts := get()
	if len(ts.Live) != 1 {
		t.Fatalf("after two calls: %+v", ts)
	}
	l := ts.Live[0]
	if l.Tool != "files" || l.Scope != "session" || len(l.KeyHash) != 12 || l.RunnerID != "tempdir" || l.Label != "files" || l.Calls != 2 || !l.Live {
		t.Fatalf("the live session: %+v", l)
	}
	if l.HeldMs < float64(time.Hour/time.Millisecond)-1000 {
		t.Fatalf("held for %v ms on a clock an hour ahead", l.HeldMs)
	}
	for _, who := range []string{"bob", "carol"} {
		want(t, f.do("GET", "/v1/sessions/"+id+"/tool-sessions", who, nil), 404, "not_found")
	}
	want(t, f.do("GET", "/v1/sessions/ses_nope/tool-sessions", "alice", nil), 404, "not_found")
	want(t, f.do("GET", "/v1/sessions/"+id+"/tool-sessions", "", nil), 401, "unauthenticated")
	want(t, f.do("DELETE", "/v1/sessions/"+id+"/tool-sessions", "alice", nil), 405, "method_not_allowed")

	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
	ts = get()
	if len(ts.Live) != 0 || len(ts.Closed) != 1 {
		t.Fatalf("after the close: %+v", ts)
	}
	if c := ts.Closed[0]; c.Reason != "session-end" || c.KeyHash != l.KeyHash || c.Live || c.Calls != 2 || c.HeldMs < 0 {
		t.Fatalf("the closed session: %+v", c)
	}
}

type timelines struct {
	Runs []struct {
		RunID      string
		Outcome    string
		DurationMs float64
		Spans      []struct {
			Kind, Name, Status  string
			StartMs, DurationMs float64
			Open                bool
		}
		Marks []struct {
			Kind, Name string
			AtMs       float64
		}
	}
}

// A run's timeline: its turns, model calls and tool calls with durations,
// in order, and its moments (a session opened, a pause, a decision); a
// paused run resumed is one run with two turns.
func TestConsoleTimeline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	id := f.open("alice")
	get := func(run string) timelines {
		t.Helper()
		r := f.do("GET", "/v1/sessions/"+id+"/timeline?run="+run, "alice", nil)
		want(t, r, 200, "")
		var tl timelines
		if err := json.Unmarshal(r.body, &tl); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	r := f.say("alice", id, `call files {"op":"write","name":"a","text":"x"}`)
	want(t, r, 200, "")
	run1 := r.json(t)["runId"].(string)
	tl := get(run1)
	if len(tl.Runs) != 1 || tl.Runs[0].RunID != run1 || tl.Runs[0].Outcome != "answer" {
		t.Fatalf("one run: %+v", tl)
	}
	var kinds []string
	for _, s := range tl.Runs[0].Spans {
		kinds = append(kinds, s.Kind+":"+s.Name+":"+s.Status)
		if s.Open || s.DurationMs < 0 || s.StartMs < 0 || s.StartMs+s.DurationMs > tl.Runs[0].DurationMs+1e-6 {
			t.Fatalf("a span out of its run: %+v in %+v", s, tl.Runs[0])
		}
	}
	if got := strings.Join(kinds, " "); got != "turn:turn:answer model:model:tool_use tool:files:ok model:model:end" {
		t.Fatalf("spans: %s", got)
	}
	sp := tl.Runs[0].Spans
	if !(sp[1].StartMs <= sp[2].StartMs && sp[2].StartMs <= sp[3].StartMs) {
		t.Fatalf("spans out of order: %+v", sp)
	}
	if m := tl.Runs[0].Marks; len(m) != 1 || m[0].Kind != "session_started" || !strings.HasPrefix(m[0].Name, "files ") {
		t.Fatalf("marks: %+v", m)
	}

	r = f.say("alice", id, `call deploy {"target":"prod"}`)
	want(t, r, 202, "")
	run2 := r.json(t)["runId"].(string)
	if tl = get(run2); len(tl.Runs) != 1 || tl.Runs[0].Outcome != "paused" || !hasMark(tl, "pause", "deploy") {
		t.Fatalf("the paused run: %+v", tl)
	}
	want(t, f.decide("alice", id, true), 200, "")
	tl = get(run2)
	turns := 0
	for _, s := range tl.Runs[0].Spans {
		if s.Kind == "turn" {
			turns++
		}
	}
	if tl.Runs[0].Outcome != "answer" || turns != 2 || !hasMark(tl, "approved", "deploy") {
		t.Fatalf("the resumed run: %+v", tl)
	}

	if all := get(""); len(all.Runs) != 2 {
		t.Fatalf("every run: %d", len(all.Runs))
	}
	if none := get("run-unknown"); len(none.Runs) != 0 {
		t.Fatalf("an unknown run: %+v", none)
	}
	want(t, f.do("GET", "/v1/sessions/"+id+"/timeline", "bob", nil), 404, "not_found")
	want(t, f.do("GET", "/v1/sessions/"+id+"/timeline", "carol", nil), 404, "not_found")
	want(t, f.do("GET", "/v1/sessions/"+id+"/timeline", "", nil), 401, "unauthenticated")
}

func hasMark(tl timelines, kind, name string) bool {
	for _, m := range tl.Runs[0].Marks {
		if m.Kind == kind && m.Name == name {
			return true
		}
	}
	return false
}

func TestConsoleCanBeLeftOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{opt: host.Options{NoConsole: true}})
	want(t, f.do("GET", "/", "", nil), 404, "not_found")
	want(t, f.do("GET", "/console/app.js", "", nil), 404, "not_found")
	want(t, f.do("GET", "/v1/me", "alice", nil), 200, "")
}

// The transcript keeps each tool call's input and output beside the
// activity that tells of it (the native agent's calls here), bounded:
// a large output is cut with its size said, a large input is left out
// with its size said. Nothing of either is in the events the host keeps.
func TestTranscriptKeepsToolCallInputAndOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	id := f.open("alice")
	big := strings.Repeat("x", host.MaxCallBytes+100)
	want(t, f.say("alice", id, `call files {"op":"write","name":"a.txt","text":"<script>alert(1)</script>"}`), 200, "")
	want(t, f.say("alice", id, `call files {"op":"write","name":"big.txt","text":"`+big+`"}`), 200, "")
	want(t, f.say("alice", id, `call files {"op":"read","name":"big.txt"}`), 200, "")

	var got struct{ Messages []host.Message }
	if err := json.Unmarshal(f.do("GET", "/v1/sessions/"+id+"/messages", "alice", nil).body, &got); err != nil {
		t.Fatal(err)
	}
	var calls []*host.CallView
	for _, m := range got.Messages {
		if m.Role == "activity" && m.Call != nil {
			calls = append(calls, m.Call)
		}
	}
	if len(calls) != 6 {
		t.Fatalf("%d activities with a call, want a start and an end for each of 3 calls: %+v", len(calls), got.Messages)
	}
	start, end := calls[0], calls[1]
	if start.Tool != "files" || start.ID == "" || start.ID != end.ID || start.Output != nil {
		t.Fatalf("the first call's start: %+v, end %+v", start, end)
	}
	var in struct{ Op, Name, Text string }
	if err := json.Unmarshal(start.Input, &in); err != nil || in.Text != "<script>alert(1)</script>" || in.Name != "a.txt" {
		t.Fatalf("the first call's input: %s (%v)", start.Input, err)
	}
	if end.Output == nil || *end.Output != "wrote a.txt" || end.IsError {
		t.Fatalf("the first call's end: %+v", end)
	}
	if calls[2].Input != nil || calls[2].InputCut <= host.MaxCallBytes {
		t.Fatalf("a large input is kept: %d bytes, cut %d", len(calls[2].Input), calls[2].InputCut)
	}
	if out := calls[5].Output; out == nil || calls[5].OutputCut != len(big) || len(*out) > host.MaxCallBytes || !strings.Contains(*out, "[cut:") {
		t.Fatalf("a large output: cut %d, %d bytes", calls[5].OutputCut, len(*calls[5].Output))
	}
	starts := f.rec.ofType("agentry.tool.start")
	if len(starts) != 3 {
		t.Fatalf("%d tool_start events recorded", len(starts))
	}
	for _, e := range starts {
		if b, _ := json.Marshal(e.Payload); strings.Contains(string(b), "script") {
			t.Fatalf("an event carries a call's arguments: %s", b)
		}
	}
}

// GET /v1/sessions/{id}/usage: a row per turn (keyed by its turn-log
// seq) and their total, only this conversation's, only for its owner.
func TestConversationUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, config{})
	id, other := f.open("alice"), f.open("alice")
	want(t, f.say("alice", id, "hello"), 200, "")
	want(t, f.say("alice", id, `call files {"op":"write","name":"a.txt","text":"x"}`), 200, "")
	want(t, f.say("alice", other, "elsewhere"), 200, "")
	r := f.do("GET", "/v1/sessions/"+id+"/usage", "alice", nil)
	want(t, r, 200, "")
	var got struct {
		SessionID string
		Turns     []host.UsageRow
		Total     host.UsageRow
		Truncated bool
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.SessionID != id || len(got.Turns) != 2 || got.Turns[0].Key != "1" || got.Turns[1].Key != "2" || got.Truncated {
		t.Fatalf("the rows: %+v", got)
	}
	if got.Turns[0].ModelCalls != 1 || got.Turns[1].ModelCalls != 2 || got.Turns[1].ToolCalls != 1 {
		t.Fatalf("the turns' usage: %+v", got.Turns)
	}
	if got.Total.Turns != 2 || got.Total.ModelCalls != 3 || got.Total.Key != "total" {
		t.Fatalf("the total: %+v", got.Total)
	}
	want(t, f.do("GET", "/v1/sessions/"+id+"/usage", "bob", nil), 404, "not_found")
	want(t, f.do("POST", "/v1/sessions/"+id+"/usage", "alice", nil), 405, "")
}
