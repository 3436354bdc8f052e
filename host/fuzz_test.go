package host_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// apiErr is what every decoder error must be: a coded client error.
func checkDecodeError(t *testing.T, err error, alsoCodes ...string) {
	t.Helper()
	b, mErr := json.Marshal(err)
	if mErr != nil {
		t.Fatalf("the error does not encode: %v", mErr)
	}
	var e struct {
		Code, Message, Field string
	}
	if jErr := json.Unmarshal(b, &e); jErr != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("the error is not a coded API error: %s (%v)", b, err)
	}
	switch {
	case slices.Contains([]string{"invalid_json", "missing_field", "invalid_field", "unknown_field"}, e.Code):
	case slices.Contains(alsoCodes, e.Code):
	default:
		t.Fatalf("unexpected code %q", e.Code)
	}
	if !utf8.ValidString(e.Message) || !utf8.ValidString(e.Field) {
		t.Fatalf("not UTF-8: %q %q", e.Message, e.Field)
	}
}

func FuzzDecodeTurn(f *testing.F) {
	for _, s := range []string{`{"message":"hi"}`, `{"message":""}`, `{}`, `{"message":5}`, `{"message":"a","x":1}`,
		`{"message":"a"} {}`, `[]`, ``, `{"message":"\u0000"}`, `{"message":null}`, "{\"message\":\"\xff\"}", `{"MESSAGE":"hi"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := host.DecodeTurn(body)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if strings.TrimSpace(req.Message) == "" {
			t.Fatal("accepted an empty message")
		}
		// What was accepted is exactly one JSON object with a string message.
		var back map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("accepted a body encoding/json refuses: %v", err)
		}
		if _, ok := back["message"].(string); !ok && len(back) > 0 {
			// keys may differ in case: encoding/json matches case-insensitively
			found := false
			for k, v := range back {
				if strings.EqualFold(k, "message") {
					_, found = v.(string)
				}
			}
			if !found {
				t.Fatalf("accepted %q without a string message", body)
			}
		}
	})
}

func FuzzDecodeDecision(f *testing.F) {
	for _, s := range []string{`{"approve":true}`, `{"approve":false,"note":"no"}`, `{"approve":"yes"}`, `{"note":"x"}`, `{"approve":null}`,
		`{"approve":true,"approve":false}`, `{"approve":1}`, `nul`, `{"approve":true}garbage`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := host.DecodeDecision(body)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		var back struct {
			Approve *bool
			Note    *string
		}
		if err := json.Unmarshal(body, &back); err != nil || back.Approve == nil || *back.Approve != d.Approve {
			t.Fatalf("accepted %q as %+v", body, d)
		}
	})
}

func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{``, `{}`, ` {} `, `{"x":1}`, `[]`, `null`, `{"agent":"claude"}`, `{"agent":"claude","model":"opus"}`,
		`{"agent":"Claude"}`, `{"agent":""}`, `{"model":"a\u0000b"}`, `{"agent":1}`, `{"agent":"a","agent":"b"}`,
		`{"clone":{"url":"https://git.example/r.git"}}`, `{"agent":"claude","clone":{"url":"https://h/r","ref":"main","credential":"gh"}}`,
		`{"clone":{"url":"file:///etc"}}`, `{"clone":{"url":"https://u@h/r"}}`, `{"clone":{"url":"https://h/r","ref":"--upload-pack=x"}}`, `{"clone":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := host.DecodeCreate(body)
		if err != nil {
			checkDecodeError(t, err, "clone_refused")
			return
		}
		if c.Agent != "" && host.CheckAgentName(c.Agent) != nil {
			t.Fatalf("accepted agent %q", c.Agent)
		}
		if len(c.Model) > 256 || strings.ContainsFunc(c.Model, func(r rune) bool { return r < 0x20 }) {
			t.Fatalf("accepted model %q", c.Model)
		}
		if c.Clone != nil && (!strings.HasPrefix(c.Clone.URL, "https://") && !strings.HasPrefix(c.Clone.URL, "http://") ||
			strings.HasPrefix(c.Clone.Ref, "-") || strings.ContainsAny(c.Clone.URL, " \n")) {
			t.Fatalf("accepted clone %+v", *c.Clone)
		}
	})
}

func FuzzParseTokens(f *testing.F) {
	_, line, _ := host.GenerateToken(alice)
	for _, s := range []string{line, "# c\n" + line, "sha256:zz a b", "", "\n\n", line + "\n" + line, "sha256: a b",
		line + " role=admin", line + " role=admin role=admin", line + " role", line + " =x", line + " k=v=w",
		line + " expires=2030-01-01T00:00:00Z created=2026-01-01T00:00:00Z", line + " expires=2030-01-01", line + " created=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		auth, err := host.ParseTokens(strings.NewReader(file))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "host: ") {
				t.Fatalf("unprefixed error %v", err)
			}
			return
		}
		// Whatever it accepted, no token is the digest line itself, and an
		// unknown token is refused.
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer not-a-known-token")
		if _, err := auth.Authenticate(r); !errors.Is(err, host.ErrBadCredentials) {
			t.Fatalf("an unknown token: %v", err)
		}
	})
}

func FuzzAuthorizationHeader(f *testing.F) {
	tok, line, _ := host.GenerateToken(alice)
	auth, err := host.ParseTokens(strings.NewReader(line))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"Bearer " + tok, "Bearer", "bearer  x", "Basic x", "", "Bearer \x00", "Bearer " + tok + "\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Authorization"] = []string{h}
		o, err := auth.Authenticate(r)
		if err == nil {
			if o.Identity != alice || o.Role != "" {
				t.Fatalf("%q proved %+v", h, o)
			}
			if !strings.Contains(h, tok) {
				t.Fatalf("%q proved alice without her token", h)
			}
		}
	})
}

// Owners never lists more owners than tokens, lists one at least when
// there is a token, and never the same owner twice.
func FuzzTokensOwners(f *testing.F) {
	a := host.TokenLine("agt_a", tool.Identity{Tenant: "acme", Principal: "alice"})
	b := host.TokenLine("agt_b", tool.Identity{Tenant: "acme", Principal: "bob"})
	a2 := host.TokenLine("agt_a2", tool.Identity{Tenant: "acme", Principal: "alice"})
	for _, seed := range []string{"", "# none\n", a + "\n" + b + "\n", a + "\n" + a2 + "\n", "\n  " + a + "  \r\n# x\n" + b} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, file string) {
		tok, err := host.ParseTokens(strings.NewReader(file))
		if err != nil {
			return
		}
		owners := tok.Owners()
		if len(owners) > tok.Len() || (tok.Len() > 0) != (len(owners) > 0) {
			t.Fatalf("%d owners for %d tokens in %q", len(owners), tok.Len(), file)
		}
		seen := map[tool.Identity]bool{}
		for _, o := range owners {
			if seen[o] || o.Tenant == "" || o.Principal == "" || o.ConversationID != "" {
				t.Fatalf("owner %+v repeated or malformed in %q", o, file)
			}
			seen[o] = true
		}
	})
}
