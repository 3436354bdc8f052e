package host_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

func TestTokensFile(t *testing.T) {
	tok, line, err := host.GenerateToken(alice)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, host.TokenPrefix) || len(tok) < 40 {
		t.Fatalf("token %q", tok)
	}
	if strings.Contains(line, tok) || strings.Contains(line, tok[len(host.TokenPrefix):]) {
		t.Fatal("the tokens file line holds the token itself")
	}
	tok2, line2, _ := host.GenerateToken(bob)
	if tok2 == tok {
		t.Fatal("two tokens alike")
	}
	path := filepath.Join(t.TempDir(), "tokens.txt")
	file := "# who may call\n\n" + line + "\n  " + line2 + "  \n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := host.LoadTokens(path)
	if err != nil || auth.Len() != 2 {
		t.Fatalf("load: %d %v", auth.Len(), err)
	}
	for _, c := range []struct {
		header string
		want   tool.Identity
		err    error
	}{
		{"Bearer " + tok, alice, nil},
		{"bearer " + tok2, bob, nil},
		{"BEARER  " + tok, alice, nil},
		{"", tool.Identity{}, host.ErrNoCredentials},
		{"Bearer", tool.Identity{}, host.ErrBadCredentials},
		{"Bearer ", tool.Identity{}, host.ErrBadCredentials},
		{"Bearer " + tok + "x", tool.Identity{}, host.ErrBadCredentials},
		{"Bearer " + tok[:len(tok)-1], tool.Identity{}, host.ErrBadCredentials},
		{"Bearer " + tok + " " + tok2, tool.Identity{}, host.ErrBadCredentials},
		{"Basic " + tok, tool.Identity{}, host.ErrBadCredentials},
		{tok, tool.Identity{}, host.ErrBadCredentials},
		{"Bearer " + strings.TrimPrefix(line, "sha256:")[:64], tool.Identity{}, host.ErrBadCredentials}, // the digest is not the token
	} {
		r := httptest.NewRequest("GET", "/v1/sessions", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		o, err := auth.Authenticate(r)
		if !errors.Is(err, c.err) || o.Identity != c.want || o.Role != "" {
			t.Errorf("%q: %+v, %v", c.header, o, err)
		}
		if err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("an error holds the token")
		}
	}
	// Two Authorization headers: refused, whatever they hold.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Add("Authorization", "Bearer "+tok)
	r.Header.Add("Authorization", "Bearer "+tok2)
	if _, err := auth.Authenticate(r); !errors.Is(err, host.ErrBadCredentials) {
		t.Fatalf("two headers: %v", err)
	}
}

func TestTokensFileRefusals(t *testing.T) {
	_, line, _ := host.GenerateToken(alice)
	digest := strings.Fields(line)[0]
	for _, c := range []struct{ name, file, want string }{
		{"plain token", host.TokenPrefix + "abc acme alice\n", "first field must be sha256"},
		{"short digest", "sha256:abcd acme alice\n", "64 hex digits"},
		{"not hex", "sha256:" + strings.Repeat("z", 64) + " acme alice\n", "not hex"},
		{"two fields", digest + " acme\n", "found 2 fields"},
		{"a fourth field that is no attribute", digest + " acme alice extra\n", "\"extra\" after the principal is not an attribute"},
		{"duplicate", line + "\n" + line + "\n", "listed twice"},
		{"control char", digest + " ac\x01me alice\n", "printable"},
		{"long name", digest + " " + strings.Repeat("a", 129) + " alice\n", "1 to 128"},
		{"long line", strings.Repeat("#", 5000) + "\n", "too long"},
	} {
		_, err := host.ParseTokens(strings.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "line") {
			t.Errorf("%s: the error does not say which line: %v", c.name, err)
		}
	}
	if _, _, err := host.GenerateToken(tool.Identity{Tenant: "a b", Principal: "c"}); err == nil {
		t.Fatal("a tenant with a space")
	}
	if _, err := host.LoadTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing file")
	}
}

// Identity is the MCP door's shape of the one authenticator: a listed
// token proves its owner; no header is no credentials; anything else is
// refused.
func TestTokensIdentityForTheMCPDoor(t *testing.T) {
	alice := tool.Identity{Tenant: "acme", Principal: "alice"}
	good := host.TokenLine("agt_a", tool.Identity{Tenant: "acme", Principal: "alice"}) + "\n\n  # comment\n" +
		host.TokenLine("agt_b", tool.Identity{Tenant: "acme", Principal: "bob"})
	toks, err := host.ParseTokens(strings.NewReader(good))
	if err != nil || toks.Len() != 2 {
		t.Fatalf("%v, %v", toks, err)
	}
	auth := host.Chain{toks}.Identity
	for _, c := range []struct {
		hdr  []string
		want *tool.Identity
		bad  bool
	}{
		{nil, nil, false},
		{[]string{"Bearer agt_a"}, &alice, false},
		{[]string{"bearer agt_a"}, &alice, false},
		{[]string{"Bearer agt_c"}, nil, true},
		{[]string{"Basic agt_a"}, nil, true},
		{[]string{"Bearer agt_a", "Bearer agt_a"}, nil, true},
		{[]string{"Bearer " + strings.Repeat("x", 5000)}, nil, true},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
		for _, h := range c.hdr {
			r.Header.Add("Authorization", h)
		}
		id, err := auth(r)
		if (err != nil) != c.bad || (id == nil) != (c.want == nil) || (id != nil && *id != *c.want) {
			t.Errorf("%q: %v, %v", c.hdr, id, err)
		}
		if c.bad && !errors.Is(err, host.ErrBadCredentials) {
			t.Errorf("%q: %v, want ErrBadCredentials", c.hdr, err)
		}
	}
}

// A tokens file line may carry key=value attributes after its three
// fields; role=admin makes the owner an admin of the line's tenant and of
// no other. Anything else after the principal is refused by name.
func TestTokensRoleAttribute(t *testing.T) {
	file := host.TokenLine("agt_admin", tool.Identity{Tenant: "acme", Principal: "root"}) + " role=admin\n" +
		host.TokenLine("agt_person", alice) + "\n"
	toks, err := host.ParseTokens(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token string
		role  host.Role
	}{{"agt_admin", host.RoleAdmin}, {"agt_person", ""}} {
		r := httptest.NewRequest("GET", "/v1/sessions", nil)
		r.Header.Set("Authorization", "Bearer "+c.token)
		who, err := toks.Authenticate(r)
		if err != nil || who.Role != c.role {
			t.Fatalf("%s: %+v, %v", c.token, who, err)
		}
		if who.AdminOf("acme") != (c.role == host.RoleAdmin) || who.AdminOf("globex") || who.AdminOf("") {
			t.Fatalf("%s: AdminOf acme %v, globex %v", c.token, who.AdminOf("acme"), who.AdminOf("globex"))
		}
	}
	if owners := toks.Owners(); len(owners) != 2 || owners[0].Principal != "root" {
		t.Fatalf("owners %+v", owners)
	}

	base := host.TokenLine("agt_x", alice)
	for _, c := range []struct{ line, want string }{
		{base + " role=root", "the one role is admin"},
		{base + " role=", "the one role is admin"},
		{base + " role=admin role=admin", "given twice"},
		{base + " colour=blue", `unknown attribute "colour"`},
		{base + " admin", "is not an attribute"},
		{base + " =admin", "is not an attribute"},
		{base + " " + strings.Repeat("k", 40) + "=v", `unknown attribute "kkkkkkkk…"`},
	} {
		_, err := host.ParseTokens(strings.NewReader(c.line))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v, want an error saying %q", c.line, err, c.want)
		}
	}
}

// refusing is an Authenticator that refuses every request with err.
type refusing struct{ err error }

func (r refusing) Authenticate(*http.Request) (host.Caller, error) { return host.Caller{}, r.err }

// A chain asks its links in order: the first that proves the caller wins;
// otherwise the refusal that says most is returned (the provider being
// down, then a coded refusal, then a plain one).
func TestChainTakesTheFirstProofAndTheMostTellingRefusal(t *testing.T) {
	toks, err := host.ParseTokens(strings.NewReader(host.TokenLine("agt_a", alice) + " role=admin"))
	if err != nil {
		t.Fatal(err)
	}
	expired := &host.CredentialError{Code: host.CodeTokenExpired, Message: "host: the token has expired; sign in again"}
	req := func(h string) *http.Request {
		r := httptest.NewRequest("GET", "/v1/sessions", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		return r
	}
	for _, c := range []struct {
		name   string
		chain  host.Chain
		header string
		want   error
	}{
		{"tokens prove", host.Chain{refusing{host.ErrIdentityUnavailable}, toks}, "Bearer agt_a", nil},
		{"no header", host.Chain{toks, refusing{expired}}, "", host.ErrNoCredentials},
		{"empty chain", host.Chain{}, "Bearer agt_a", host.ErrNoCredentials},
		{"coded over plain", host.Chain{toks, refusing{expired}}, "Bearer agt_b", expired},
		{"coded over plain, either order", host.Chain{refusing{expired}, toks}, "Bearer agt_b", expired},
		{"unavailable over coded", host.Chain{refusing{expired}, refusing{host.ErrIdentityUnavailable}}, "Bearer x", host.ErrIdentityUnavailable},
		{"plain", host.Chain{toks}, "Bearer agt_b", host.ErrBadCredentials},
	} {
		who, err := c.chain.Authenticate(req(c.header))
		if c.want == nil {
			if err != nil || who.Principal != "alice" || who.Role != host.RoleAdmin {
				t.Errorf("%s: %+v, %v", c.name, who, err)
			}
			continue
		}
		if err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if !errors.Is(expired, host.ErrBadCredentials) {
		t.Error("a CredentialError is not an ErrBadCredentials")
	}
	var down interface{ IdentityUnavailable() bool }
	if !errors.As(fmt.Errorf("wrapped: %w", host.ErrIdentityUnavailable), &down) || !down.IdentityUnavailable() {
		t.Error("ErrIdentityUnavailable does not say so to a door that cannot import host")
	}
	// The MCP door's shape: the refusal itself, so the door can tell 503
	// from 401.
	if id, err := (host.Chain{refusing{host.ErrIdentityUnavailable}}).Identity(req("Bearer x")); id != nil || err != host.ErrIdentityUnavailable {
		t.Errorf("Identity: %v, %v", id, err)
	}
}
