package host_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
)

// ruleDecision answers the pending approval with yes and a rule.
func (f *fixture) ruleDecision(who, id string, rule map[string]any) resp {
	f.t.Helper()
	return f.do("POST", "/v1/sessions/"+id+"/decision", who, map[string]any{"approve": true, "rule": rule})
}

// ruleEntries returns the turn log's entries of kind rule.
func (f *fixture) ruleEntries(who, id string) []host.Turn {
	f.t.Helper()
	r := f.do("GET", "/v1/sessions/"+id+"/turns", who, nil)
	want(f.t, r, http.StatusOK, "")
	var log struct{ Turns []host.Turn }
	if err := json.Unmarshal(r.body, &log); err != nil {
		f.t.Fatal(err)
	}
	var out []host.Turn
	for _, t := range log.Turns {
		if t.Kind == "rule" {
			out = append(out, t)
		}
	}
	return out
}

func (f *fixture) rules(who string) []map[string]any {
	f.t.Helper()
	r := f.do("GET", "/v1/rules", who, nil)
	want(f.t, r, http.StatusOK, "")
	var out struct{ Rules []map[string]any }
	if err := json.Unmarshal(r.body, &out); err != nil {
		f.t.Fatal(err)
	}
	return out.Rules
}

// TestRuleEverywhereNative: a rule made while approving a native check-in
// answers the same person's identical request in another conversation
// without asking, is logged and emitted naming the rule, never answers
// another person's (nor the same name in another tenant), and once
// revoked the question comes back.
func TestRuleEverywhereNative(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			f := newFixture(t, config{dsn: sk.dsn(t)})
			ask := `call deploy {"target":"prod"}`

			a := f.open("alice")
			want(t, f.say("alice", a, ask), http.StatusAccepted, "")
			r := f.ruleDecision("alice", a, map[string]any{"scope": "everywhere"})
			want(t, r, http.StatusOK, "")
			body := r.json(t)
			if body["output"] != "tool said: deployed prod" {
				t.Fatalf("the approved call did not run: %s", r.body)
			}
			made, _ := body["rule"].(map[string]any)
			id, _ := made["id"].(string)
			if made["scope"] != "everywhere" || made["match"] != "exact" || made["tool"] != "deploy" || id == "" {
				t.Fatalf("rule in the answer: %s", r.body)
			}
			if got := f.rules("alice"); len(got) != 1 || got[0]["id"] != id {
				t.Fatalf("alice's rules: %v", got)
			}

			// The second identical request, in another conversation: no person.
			b := f.open("alice")
			r = f.say("alice", b, `call deploy { "target" : "prod" }`) // the same JSON value, spelled differently
			want(t, r, http.StatusOK, "")
			if r.json(t)["output"] != "tool said: deployed prod" {
				t.Fatalf("auto-answered turn: %s", r.body)
			}
			entries := f.ruleEntries("alice", b)
			if len(entries) != 1 || entries[0].Rule != id || entries[0].Outcome != host.TurnApproved || entries[0].RunID == "" {
				t.Fatalf("turn log of the auto-answer: %+v", entries)
			}
			evs := f.rec.ofType(host.TypeRuleApplied)
			if len(evs) != 1 {
				t.Fatalf("%d rule_applied events, want 1", len(evs))
			}
			if p := evs[0].Payload.(*host.RuleAppliedEvent); p.Rule != id || p.Tool != "deploy" || evs[0].Meta.SessionID != b || evs[0].Meta.Principal != "alice" {
				t.Fatalf("rule_applied: %+v %+v", p, evs[0].Meta)
			}
			msgs := f.do("GET", "/v1/sessions/"+b+"/messages", "alice", nil)
			if !json.Valid(msgs.body) || !strings.Contains(string(msgs.body), "approved by your rule "+id) {
				t.Fatalf("the transcript does not say the rule answered: %s", msgs.body)
			}

			// Other arguments: asked.
			want(t, f.say("alice", b, `call deploy {"target":"staging"}`), http.StatusAccepted, "")
			want(t, f.decide("alice", b, false), http.StatusOK, "")

			// Another person, and the same principal name in another tenant: asked.
			for _, who := range []string{"bob", "carol"} {
				c := f.open(who)
				want(t, f.say(who, c, ask), http.StatusAccepted, "")
				if got := f.rules(who); len(got) != 0 {
					t.Fatalf("%s sees rules: %v", who, got)
				}
				want(t, f.do("DELETE", "/v1/rules/"+id, who, nil), http.StatusNotFound, "rule_not_found")
				want(t, f.decide(who, c, false), http.StatusOK, "")
			}

			// Revoked: the question comes back.
			want(t, f.do("DELETE", "/v1/rules/"+id, "alice", nil), http.StatusNoContent, "")
			want(t, f.do("DELETE", "/v1/rules/"+id, "alice", nil), http.StatusNotFound, "rule_not_found")
			if got := f.rules("alice"); len(got) != 0 {
				t.Fatalf("rules after revoking: %v", got)
			}
			d := f.open("alice")
			want(t, f.say("alice", d, ask), http.StatusAccepted, "")
			want(t, f.decide("alice", d, true), http.StatusOK, "")
			if n := len(f.rec.ofType(host.TypeRuleApplied)); n != 1 {
				t.Fatalf("%d rule_applied events after revoking, want still 1", n)
			}
		})
	}
}

// TestRuleConversationNative: a conversation's rule answers any arguments
// of its tool there, and nothing in the person's other conversations.
func TestRuleConversationNative(t *testing.T) {
	f := newFixture(t, config{})
	a := f.open("alice")
	want(t, f.say("alice", a, `call deploy {"target":"prod"}`), http.StatusAccepted, "")
	r := f.ruleDecision("alice", a, map[string]any{"scope": "conversation"})
	want(t, r, http.StatusOK, "")
	made, _ := r.json(t)["rule"].(map[string]any)
	if made["scope"] != "conversation" || made["match"] != "any" || made["sessionId"] != a {
		t.Fatalf("rule: %s", r.body)
	}
	r = f.say("alice", a, `call deploy {"target":"staging"}`)
	want(t, r, http.StatusOK, "")
	if r.json(t)["output"] != "tool said: deployed staging" {
		t.Fatalf("auto-answered turn: %s", r.body)
	}
	b := f.open("alice")
	want(t, f.say("alice", b, `call deploy {"target":"prod"}`), http.StatusAccepted, "")
}

// TestRuleStreamed: a streamed turn a rule answers shows the answer as an
// activity, not as a request the person must answer.
func TestRuleStreamed(t *testing.T) {
	f := newFixture(t, config{})
	a := f.open("alice")
	want(t, f.say("alice", a, `call deploy {"target":"prod"}`), http.StatusAccepted, "")
	want(t, f.ruleDecision("alice", a, map[string]any{"scope": "conversation"}), http.StatusOK, "")
	r := f.do("POST", "/v1/sessions/"+a+"/turns", "alice", map[string]string{"message": `call deploy {"target":"prod"}`}, "Accept", "text/event-stream")
	want(t, r, http.StatusOK, "")
	var sawActivity bool
	for _, e := range readSSE(t, bytes.NewReader(r.body)) {
		if e.name != "output" {
			continue
		}
		var o map[string]any
		_ = json.Unmarshal(e.data, &o)
		switch {
		case o["kind"] == "request":
			t.Fatalf("a request the rule answered was streamed: %s", e.data)
		case o["kind"] == "activity" && strings.Contains(o["text"].(string), "approved by your rule"):
			sawActivity = true
		}
	}
	if !sawActivity {
		t.Fatalf("no activity said the rule answered:\n%s", r.body)
	}
}

// TestRuleRefused: a rule that does not fit what was asked, or one past
// the person's bound, is refused and the question still waits.
func TestRuleRefused(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) { ruleRefused(t, sk.dsn(t)) })
	}
}

func ruleRefused(t *testing.T, dsn string) {
	f := newFixture(t, config{dsn: dsn, opt: host.Options{MaxRulesPerPrincipal: 1}})
	a := f.open("alice")
	want(t, f.say("alice", a, `call deploy {"target":"prod"}`), http.StatusAccepted, "")
	for _, c := range []struct {
		name string
		body any
		code string
	}{
		{"any everywhere", map[string]any{"approve": true, "rule": map[string]any{"scope": "everywhere", "match": "any"}}, "invalid_field"},
		{"command of no command", map[string]any{"approve": true, "rule": map[string]any{"scope": "everywhere", "match": "command", "pattern": "deploy prod"}}, "invalid_field"},
		{"pattern without command", map[string]any{"approve": true, "rule": map[string]any{"scope": "everywhere", "pattern": "deploy"}}, "invalid_field"},
		{"unknown scope", map[string]any{"approve": true, "rule": map[string]any{"scope": "forever"}}, "invalid_field"},
		{"no scope", map[string]any{"approve": true, "rule": map[string]any{}}, "missing_field"},
		{"unknown key", map[string]any{"approve": true, "rule": map[string]any{"scope": "conversation", "tool": "x"}}, "unknown_field"},
		{"a decline", map[string]any{"approve": false, "rule": map[string]any{"scope": "conversation"}}, "invalid_field"},
		{"an interaction", map[string]any{"interaction": "i-1", "answer": "x", "rule": map[string]any{"scope": "conversation"}}, "unknown_field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.do("POST", "/v1/sessions/"+a+"/decision", "alice", c.body)
			want(t, r, http.StatusBadRequest, c.code)
		})
	}
	if got := f.rules("alice"); len(got) != 0 {
		t.Fatalf("a refused rule was stored: %v", got)
	}
	want(t, f.ruleDecision("alice", a, map[string]any{"scope": "everywhere"}), http.StatusOK, "")
	b := f.open("alice")
	want(t, f.say("alice", b, `call deploy {"target":"staging"}`), http.StatusAccepted, "")
	want(t, f.ruleDecision("alice", b, map[string]any{"scope": "everywhere"}), http.StatusConflict, "too_many_rules")
	want(t, f.decide("alice", b, true), http.StatusOK, "")
	want(t, f.do("DELETE", "/v1/rules/not-a-rule", "alice", nil), http.StatusNotFound, "rule_not_found")
	want(t, f.do("GET", "/v1/rules", "", nil), http.StatusUnauthorized, "unauthenticated")
}
