package host_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// A tenant's admin reads the metadata of every conversation of the tenant
// (never a transcript) and closes them; another tenant's conversations do
// not exist for them, a person of the tenant is told the path is for
// admins, and nobody's role opens another's conversation on the person's
// own paths.
func TestTenantAdminReadsAndClosesOnlyTheirTenant(t *testing.T) {
	f := newFixture(t, config{})
	a1 := f.open("alice")
	want(t, f.say("alice", a1, "hello"), http.StatusOK, "")
	b1 := f.open("bob")
	g1 := f.open("carol") // globex

	list := f.do("GET", "/v1/tenants/acme/sessions", "root", nil)
	want(t, list, http.StatusOK, "")
	var got struct {
		Tenant   string
		Sessions []map[string]any
	}
	decode(t, list, &got)
	var seen []string
	for _, s := range got.Sessions {
		seen = append(seen, s["principal"].(string)+":"+s["sessionId"].(string))
		if _, ok := s["messages"]; ok {
			t.Fatalf("an admin's listing carries messages: %v", s)
		}
	}
	slices.Sort(seen)
	if got.Tenant != "acme" || !slices.Equal(seen, []string{"alice:" + a1, "bob:" + b1}) {
		t.Fatalf("acme's conversations: %s", list.body)
	}

	one := f.do("GET", "/v1/tenants/acme/sessions/"+a1, "root", nil)
	want(t, one, http.StatusOK, "")
	if m := one.json(t); m["principal"] != "alice" || m["turns"] != float64(1) || m["state"] != "open" {
		t.Fatalf("alice's conversation for the admin: %s", one.body)
	}

	for _, c := range []struct {
		method, path, who string
		status            int
		code              string
	}{
		{"GET", "/v1/tenants/globex/sessions", "root", 404, "not_found"},              // another tenant
		{"GET", "/v1/tenants/acme/sessions/" + g1, "root", 404, "not_found"},          // another tenant's, under acme
		{"GET", "/v1/tenants/globex/sessions/" + g1, "root", 404, "not_found"},        // another tenant's, under its own
		{"DELETE", "/v1/tenants/acme/sessions/" + g1, "root", 404, "not_found"},       // closing it
		{"DELETE", "/v1/tenants/acme/sessions/" + a1, "boss", 404, "not_found"},       // globex's admin on acme
		{"GET", "/v1/tenants/acme/sessions", "alice", 403, "forbidden"},               // a person of acme
		{"GET", "/v1/tenants/acme/sessions/" + b1, "alice", 403, "forbidden"},         // a person, another's
		{"GET", "/v1/tenants/globex/sessions", "alice", 404, "not_found"},             // a person, another tenant
		{"GET", "/v1/sessions/" + b1, "alice", 404, "not_found"},                      // a person cannot read another's
		{"GET", "/v1/sessions/" + a1, "root", 404, "not_found"},                       // the role does not open the person's paths
		{"GET", "/v1/sessions/" + a1 + "/messages", "root", 404, "not_found"},         // nor the transcript
		{"GET", "/v1/tenants/acme/sessions/ses_nothere", "root", 404, "not_found"},    // no such id
		{"PUT", "/v1/tenants/acme/sessions/" + a1, "root", 405, "method_not_allowed"}, // known path, other method
		{"GET", "/v1/tenants/acme/sessions", "", 401, "unauthenticated"},              // nobody
		{"GET", "/v1/tenants/acme/sessions", "agt_not-a-token", 401, "invalid_token"}, // a stranger
	} {
		r := f.do(c.method, c.path, c.who, nil)
		if r.status != c.status || r.code(t) != c.code {
			t.Errorf("%s %s as %q: %d %s, want %d %s", c.method, c.path, c.who, r.status, r.body, c.status, c.code)
		}
	}

	// The admin closes bob's conversation: bob finds it closed, its
	// transcript kept; carol's in globex stays open.
	want(t, f.do("DELETE", "/v1/tenants/acme/sessions/"+b1, "root", nil), http.StatusNoContent, "")
	if st := f.do("GET", "/v1/sessions/"+b1, "bob", nil).json(t)["state"]; st != "closed" {
		t.Fatalf("bob's conversation after the admin closed it: %v", st)
	}
	want(t, f.do("DELETE", "/v1/tenants/acme/sessions/"+b1, "root", nil), http.StatusNoContent, "") // twice: a no-op
	if st := f.do("GET", "/v1/sessions/"+g1, "carol", nil).json(t)["state"]; st != "open" {
		t.Fatalf("carol's conversation: %v", st)
	}
	open := f.do("GET", "/v1/tenants/acme/sessions?open=true", "root", nil)
	decode(t, open, &got)
	if len(got.Sessions) != 1 || got.Sessions[0]["sessionId"] != a1 {
		t.Fatalf("acme's open conversations: %s", open.body)
	}
	if me := f.do("GET", "/v1/me", "root", nil).json(t); me["role"] != "admin" || me["tenant"] != "acme" {
		t.Fatalf("/v1/me of an admin: %v", me)
	}
	if me := f.do("GET", "/v1/me", "alice", nil).json(t); me["role"] != nil {
		t.Fatalf("/v1/me of a person: %v", me)
	}
}

func decode(t *testing.T, r resp, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d: %v\n%s", r.status, err, r.body)
	}
}
