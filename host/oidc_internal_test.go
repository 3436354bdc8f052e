package host

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// fuzzKey is the Ed25519 key the fuzz tests' seed tokens are signed with
// (from a fixed seed, so the corpus in testdata stays valid).
var fuzzKey = ed25519.NewKeyFromSeed([]byte("agentry-oidc-fuzz-seed-32-bytes!"))

const (
	fuzzIssuer = "https://idp.example.test/"
	fuzzKid    = "fuzz-key"
)

var fuzzNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzOIDC is an OIDC verifier holding fuzzKey as the provider's one key,
// fetched just now: no test here reaches a provider.
func fuzzOIDC(t testing.TB) *OIDC {
	cfg := OIDCConfig{Issuer: fuzzIssuer, Audience: "agentry", TenantClaim: "org", RolesClaim: "groups", Now: func() time.Time { return fuzzNow }}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	ks := &keySet{url: "http://127.0.0.1:0/never", client: cfg.HTTPClient, now: cfg.Now, log: cfg.Logger, maxAge: cfg.KeysMaxAge, floor: cfg.RefreshFloor,
		keys: []jose.JSONWebKey{{Key: fuzzKey.Public(), KeyID: fuzzKid, Algorithm: string(jose.EdDSA), Use: "sig"}}, fetched: fuzzNow, tried: fuzzNow}
	return &OIDC{cfg: cfg, keys: ks}
}

func fuzzToken(t testing.TB, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: fuzzKey}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", fuzzKid))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	jws, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := jws.CompactSerialize()
	return out
}

func fuzzClaims() map[string]any {
	return map[string]any{"iss": fuzzIssuer, "aud": []string{"agentry"}, "sub": "alice", "org": "acme",
		"groups": []string{"agentry-admin"}, "exp": fuzzNow.Add(time.Hour).Unix(), "iat": fuzzNow.Unix()}
}

// Whatever the bearer token, the verifier answers without panicking, with
// a caller only for a token the provider's key signed (the one principal
// such a token names), and otherwise with a refusal that is
// ErrBadCredentials and repeats nothing of the token.
func FuzzOIDCToken(f *testing.F) {
	o := fuzzOIDC(f)
	good := fuzzToken(f, fuzzClaims())
	parts := strings.Split(good, ".")
	noTenant := fuzzClaims()
	delete(noTenant, "org")
	for _, s := range []string{
		good,
		fuzzToken(f, noTenant),
		parts[0] + "." + parts[1] + ".",
		"eyJhbGciOiJub25lIn0." + parts[1] + ".",
		parts[0] + ".e30." + parts[2],
		"a.b.c", "..", "agt_not-a-jwt", good + "x", "x" + good,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		r := httptest.NewRequest("GET", "/v1/sessions", nil)
		r.Header["Authorization"] = []string{"Bearer " + tok}
		who, err := o.Authenticate(r)
		if err == nil {
			if who.Principal != "alice" || who.Tenant != "acme" || who.Role != RoleAdmin {
				t.Fatalf("%q proved %+v", tok, who)
			}
			return
		}
		if !errors.Is(err, ErrBadCredentials) && !errors.Is(err, ErrNoCredentials) {
			t.Fatalf("%q: %v is neither a refusal nor no credentials", tok, err)
		}
		for _, p := range strings.Split(tok, ".") {
			if len(p) > 8 && strings.Contains(err.Error(), p) {
				t.Fatalf("the refusal repeats the token: %v", err)
			}
		}
	})
}

// The registered claims are judged with the leeway, and the identity
// claims read as configured, dots reaching into nested claims.
func TestOIDCClaims(t *testing.T) {
	o := fuzzOIDC(t)
	check := func(what string, mut func(map[string]any), code Code) {
		t.Helper()
		c := fuzzClaims()
		mut(c)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+fuzzToken(t, c))
		_, err := o.Authenticate(r)
		var ce *CredentialError
		switch {
		case code == "" && err != nil:
			t.Errorf("%s: %v", what, err)
		case code != "" && (!errors.As(err, &ce) || ce.Code != code):
			t.Errorf("%s: %v, want %s", what, err, code)
		}
	}
	at := func(d time.Duration) int64 { return fuzzNow.Add(d).Unix() }
	check("good", func(map[string]any) {}, "")
	check("exp within the leeway", func(c map[string]any) { c["exp"] = at(-20 * time.Second) }, "")
	check("exp past the leeway", func(c map[string]any) { c["exp"] = at(-40 * time.Second) }, CodeTokenExpired)
	check("no exp", func(c map[string]any) { delete(c, "exp") }, CodeClaimMissing)
	check("nbf within the leeway", func(c map[string]any) { c["nbf"] = at(20 * time.Second) }, "")
	check("nbf ahead", func(c map[string]any) { c["nbf"] = at(time.Minute) }, CodeInvalidToken)
	check("iat ahead", func(c map[string]any) { c["iat"] = at(time.Minute) }, CodeInvalidToken)
	check("aud a string", func(c map[string]any) { c["aud"] = "agentry" }, "")
	check("aud another", func(c map[string]any) { c["aud"] = []string{"billing"} }, CodeWrongAudience)
	check("no aud", func(c map[string]any) { delete(c, "aud") }, CodeWrongAudience)
	check("iss another", func(c map[string]any) { c["iss"] = "https://evil.example.test/" }, CodeWrongIssuer)
	check("exp a string", func(c map[string]any) { c["exp"] = "tomorrow" }, CodeInvalidToken)
	check("no sub", func(c map[string]any) { delete(c, "sub") }, CodeClaimMissing)
	check("sub a number", func(c map[string]any) { c["sub"] = 7 }, CodeInvalidToken) // a registered claim of the wrong type
	check("tenant a number", func(c map[string]any) { c["org"] = 7 }, CodeClaimInvalid)
	check("no tenant", func(c map[string]any) { delete(c, "org") }, CodeClaimMissing)
	check("sub too long", func(c map[string]any) { c["sub"] = strings.Repeat("x", 129) }, CodeClaimInvalid)
	check("tenant with a space", func(c map[string]any) { c["org"] = "a b" }, CodeClaimInvalid)

	nested := fuzzOIDC(t)
	nested.cfg.TenantClaim, nested.cfg.RolesClaim = "org.id", "realm_access.roles"
	c := fuzzClaims()
	c["org"] = map[string]any{"id": "globex"}
	c["realm_access"] = map[string]any{"roles": []any{"x", "agentry-admin", 3}}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+fuzzToken(t, c))
	who, err := nested.Authenticate(r)
	if err != nil || who.Tenant != "globex" || who.Role != RoleAdmin {
		t.Fatalf("nested claims: %+v %v", who, err)
	}
	c["org.id"] = "initech" // a claim named with the dots themselves comes first
	r.Header.Set("Authorization", "Bearer "+fuzzToken(t, c))
	if who, err = nested.Authenticate(r); err != nil || who.Tenant != "initech" {
		t.Fatalf("a claim named with dots: %+v %v", who, err)
	}
}

// signingKeys keeps public signing keys of the allowed kinds and nothing
// else, from whatever the provider serves.
func FuzzSigningKeys(f *testing.F) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set := func(keys ...jose.JSONWebKey) string {
		b, _ := json.Marshal(jose.JSONWebKeySet{Keys: keys})
		return string(b)
	}
	for _, s := range []string{
		set(jose.JSONWebKey{Key: rsaKey.Public(), KeyID: "r", Algorithm: "RS256", Use: "sig"}),
		set(jose.JSONWebKey{Key: rsaKey, KeyID: "private", Algorithm: "RS256"}),
		set(jose.JSONWebKey{Key: weak.Public(), KeyID: "weak", Algorithm: "RS256"}),
		set(jose.JSONWebKey{Key: ecKey.Public(), KeyID: "e", Algorithm: "ES256"}, jose.JSONWebKey{Key: fuzzKey.Public(), KeyID: "o", Algorithm: "EdDSA"}),
		set(jose.JSONWebKey{Key: []byte("symmetric secret"), KeyID: "hmac", Algorithm: "HS256"}),
		set(jose.JSONWebKey{Key: rsaKey.Public(), KeyID: "enc", Algorithm: "RSA-OAEP", Use: "enc"}),
		`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, `{"keys":[{"kty":"RSA"}]}`, `{"keys":[]}`, `{}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		keys, err := signingKeys(doc)
		if err != nil {
			if keys != nil {
				t.Fatal("keys and an error")
			}
			return
		}
		if len(keys) == 0 || len(keys) > maxJWKSKeys {
			t.Fatalf("%d keys without an error", len(keys))
		}
		for _, k := range keys {
			if !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
				t.Fatalf("kept %+v", k)
			}
			switch pk := k.Key.(type) {
			case *rsa.PublicKey:
				if pk.N.BitLen() < minRSABits {
					t.Fatalf("kept a %d-bit RSA key", pk.N.BitLen())
				}
			case *ecdsa.PublicKey, ed25519.PublicKey:
			default:
				t.Fatalf("kept a %T", k.Key)
			}
		}
	})
}
