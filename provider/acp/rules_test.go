package acp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/tool"
)

// hostOver serves the scripted agent through a host, for alice and bob.
type hostOver struct {
	t    *testing.T
	url  string
	toks map[string]string
}

func newHostOver(t *testing.T) *hostOver {
	t.Helper()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, nil))
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agentry.db"))
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string]string{}
	var file strings.Builder
	for _, who := range []string{"alice", "bob"} {
		o := tool.Identity{Tenant: "acme", Principal: who}
		tok, _, err := host.GenerateToken(o)
		if err != nil {
			t.Fatal(err)
		}
		toks[who] = tok
		file.WriteString(host.TokenLine(tok, o) + "\n")
	}
	auth, err := host.ParseTokens(strings.NewReader(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, EvictEvery: -1,
		WorkingDirectory: func(tool.Identity, string) (string, error) { return r.ws, nil },
		SessionConfig:    func(tool.Identity, string) json.RawMessage { return nil }}) // as agentry serve --agent acp passes
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("host shutdown: %v", err)
		}
	})
	return &hostOver{t: t, url: srv.URL, toks: toks}
}

func (o *hostOver) do(method, path, who string, body any) (int, map[string]any) {
	o.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, o.url+path, rd)
	if err != nil {
		o.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+o.toks[who])
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			o.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
	}
	return res.StatusCode, m
}

func (o *hostOver) open(who string) string {
	o.t.Helper()
	st, m := o.do("POST", "/v1/sessions", who, nil)
	if st != http.StatusCreated {
		o.t.Fatalf("open: %d %v", st, m)
	}
	return m["sessionId"].(string)
}

// say sends a message and checks the status; it returns the body.
func (o *hostOver) say(who, id, msg string, status int) map[string]any {
	o.t.Helper()
	st, m := o.do("POST", "/v1/sessions/"+id+"/turns", who, map[string]string{"message": msg})
	if st != status {
		o.t.Fatalf("%s says %q: %d %v, want %d", who, msg, st, m, status)
	}
	return m
}

func (o *hostOver) decide(who, id string, body map[string]any) map[string]any {
	o.t.Helper()
	st, m := o.do("POST", "/v1/sessions/"+id+"/decision", who, body)
	if st != http.StatusOK {
		o.t.Fatalf("decision %v: %d %v", body, st, m)
	}
	return m
}

// TestHostRulesAnswerPermissions: a person's standing rule answers an ACP
// agent's session/request_permission through the host with the agent's
// own allow_once option — in another conversation too, for a command
// rule that holds everywhere — never answers another person's, never one
// whose agent offers no one-time yes, and once revoked the question comes
// back.
func TestHostRulesAnswerPermissions(t *testing.T) {
	o := newHostOver(t)
	a := o.open("alice")
	m := o.say("alice", a, "run git diff main", http.StatusAccepted)
	aw := m["awaiting"].(map[string]any)
	if aw["tool"] != "Run" || aw["args"].(map[string]any)["command"] != "git diff main" {
		t.Fatalf("awaiting: %v", aw)
	}
	m = o.decide("alice", a, map[string]any{"approve": true, "rule": map[string]any{"scope": "everywhere", "match": "command", "pattern": "git diff *"}})
	if m["output"] != "chose yes" {
		t.Fatalf("the person's yes: %v", m)
	}
	rule := m["rule"].(map[string]any)["id"].(string)

	// The second request, and one of another operand, in another conversation: no person.
	b := o.open("alice")
	for _, cmd := range []string{"run git diff main", "run git diff src/x.go"} {
		if m := o.say("alice", b, cmd, http.StatusOK); m["output"] != "chose yes" {
			t.Fatalf("%q answered by the rule: %v", cmd, m)
		}
	}
	_, log := o.do("GET", "/v1/sessions/"+b+"/turns", "alice", nil)
	n := 0
	for _, e := range log["turns"].([]any) {
		if e := e.(map[string]any); e["kind"] == "rule" {
			if e["rule"] != rule || e["outcome"] != "approved" {
				t.Fatalf("turn-log entry: %v", e)
			}
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d rule entries in the turn log, want 2: %v", n, log)
	}

	// Not the pattern (an option, a shell separator): asked.
	for _, cmd := range []string{"run git diff --output=/tmp/x", "run git diff main; rm -rf ."} {
		o.say("alice", b, cmd, http.StatusAccepted)
		o.decide("alice", b, map[string]any{"approve": false})
	}
	// An agent that offers only "always": the host's rule does not answer it.
	o.say("alice", b, "run-always git diff main", http.StatusAccepted)
	o.decide("alice", b, map[string]any{"approve": false})

	// Another person: asked, and the rule is not theirs to see or revoke.
	c := o.open("bob")
	o.say("bob", c, "run git diff main", http.StatusAccepted)
	if st, _ := o.do("DELETE", "/v1/rules/"+rule, "bob", nil); st != http.StatusNotFound {
		t.Fatalf("bob revoking alice's rule: %d", st)
	}
	o.decide("bob", c, map[string]any{"approve": false})

	// Revoked: the question comes back.
	if st, _ := o.do("DELETE", "/v1/rules/"+rule, "alice", nil); st != http.StatusNoContent {
		t.Fatalf("revoking: %d", st)
	}
	o.say("alice", b, "run git diff main", http.StatusAccepted)
	if m := o.decide("alice", b, map[string]any{"approve": true}); m["output"] != "chose yes" {
		t.Fatalf("the person's yes after revoking: %v", m)
	}
}

// TestHostConversationRuleACP: a conversation's rule answers any request
// of the tool there, with the agent's allow_once.
func TestHostConversationRuleACP(t *testing.T) {
	o := newHostOver(t)
	a := o.open("alice")
	o.say("alice", a, "ask", http.StatusAccepted)
	if m := o.decide("alice", a, map[string]any{"approve": true, "rule": map[string]any{"scope": "conversation"}}); m["output"] != "chose yes" {
		t.Fatalf("the person's yes: %v", m)
	}
	if m := o.say("alice", a, "ask", http.StatusOK); m["output"] != "chose yes" {
		t.Fatalf("the rule's yes: %v", m)
	}
	b := o.open("alice")
	o.say("alice", b, "ask", http.StatusAccepted)
	o.decide("alice", b, map[string]any{"approve": false})
}
