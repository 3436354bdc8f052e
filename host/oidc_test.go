package host_test

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/internal/hydratest"
)

// clock is a settable clock for judging tokens and aging keys.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// countingTransport counts the requests for each path.
type countingTransport struct {
	mu    sync.Mutex
	paths map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if c.paths == nil {
		c.paths = map[string]int{}
	}
	c.paths[r.URL.Path]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paths[path]
}

const jwksPath = "/.well-known/jwks.json"

// oidcRig is an OIDC authenticator on a Hydra, with its clock and a count
// of its requests to the provider.
type oidcRig struct {
	p        *hydratest.Provider
	auth     *host.OIDC
	cfg      host.OIDCConfig
	clock    *clock
	requests *countingTransport
	log      syncBuffer // what the authenticator logged
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newOIDCRig(t *testing.T, p *hydratest.Provider, mut func(*host.OIDCConfig)) *oidcRig {
	t.Helper()
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	rig := &oidcRig{p: p, clock: newClock(), requests: &countingTransport{}}
	rig.cfg = host.OIDCConfig{
		Logger:     slog.New(slog.NewTextHandler(&rig.log, nil)),
		Issuer:     p.Issuer,
		Audience:   "agentry-" + hex.EncodeToString(randomBytes(4)),
		Tenant:     "acme",
		HTTPClient: &http.Client{Transport: rig.requests, Timeout: 5 * time.Second},
		Now:        rig.clock.Now,
	}
	if mut != nil {
		mut(&rig.cfg)
	}
	a, err := host.NewOIDC(t.Context(), rig.cfg)
	if err != nil {
		t.Fatal(err)
	}
	rig.auth = a
	return rig
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func bearerReq(tok string) *http.Request {
	r := httptest.NewRequest("GET", "/v1/sessions", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

// refusedWith checks an authenticator's refusal carries code, and says
// nothing the token holds.
func refusedWith(t *testing.T, what string, err error, code host.Code, tok string) {
	t.Helper()
	var ce *host.CredentialError
	if code == "" && err != host.ErrBadCredentials {
		t.Fatalf("%s: %v, want a plain refusal", what, err)
	}
	if code != "" && (!errors.As(err, &ce) || ce.Code != code) {
		t.Fatalf("%s: %v, want a refusal coded %s", what, err, code)
	}
	if !errors.Is(err, host.ErrBadCredentials) {
		t.Fatalf("%s: %v is not ErrBadCredentials", what, err)
	}
	for _, part := range strings.Split(tok, ".") {
		if len(part) > 8 && strings.Contains(err.Error(), part) {
			t.Fatalf("%s: the refusal repeats the token: %v", what, err)
		}
	}
}

// A client-credentials token from Hydra proves its client, in the fixed
// tenant; it opens and reads conversations of its own through the API,
// beside the tokens file, which keeps working; neither reaches the
// other's conversations.
func TestOIDCClientCredentialsTokenIsACaller(t *testing.T) {
	p := hydratest.Shared(t)
	rig := newOIDCRig(t, p, nil)
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{rig.cfg.Audience}})
	jwt := p.ClientCredentials(t, c, rig.cfg.Audience)

	f := newFixture(t, config{auth: rig.auth})
	f.tokens["svc"] = jwt
	me := f.do("GET", "/v1/me", "svc", nil)
	want(t, me, http.StatusOK, "")
	if m := me.json(t); m["tenant"] != "acme" || m["principal"] != c.ID || m["role"] != nil {
		t.Fatalf("/v1/me: %s", me.body)
	}
	id := f.open("svc")
	want(t, f.do("GET", "/v1/sessions/"+id, "svc", nil), http.StatusOK, "")
	want(t, f.do("GET", "/v1/sessions/"+id, "alice", nil), http.StatusNotFound, "not_found")
	mine := f.open("alice")
	want(t, f.do("GET", "/v1/sessions/"+mine, "svc", nil), http.StatusNotFound, "not_found")
	r := f.say("svc", id, "hello")
	want(t, r, http.StatusOK, "")
}

// An authorization-code token (a person signed in through login and
// consent) carries the tenant and roles claims the host is told to read:
// the admin role makes an admin of the token's tenant only.
func TestOIDCAuthorizationCodeTokenCarriesTenantAndRole(t *testing.T) {
	p := hydratest.Shared(t)
	rig := newOIDCRig(t, p, func(c *host.OIDCConfig) {
		c.Tenant, c.TenantClaim, c.RolesClaim = "", "tenant", "groups"
	})
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{rig.cfg.Audience}, Redirect: "http://127.0.0.1:9/signed-in"})
	f := newFixture(t, config{auth: rig.auth})
	for _, tc := range []struct {
		name, subject string
		claims        map[string]any
		tenant        string
		admin         bool
	}{
		{"admin", "dana", map[string]any{"tenant": "globex", "groups": []string{"staff", "agentry-admin"}}, "globex", true},
		{"person", "erin", map[string]any{"tenant": "globex", "groups": []string{"staff"}}, "globex", false},
		{"a role that is one string", "fay", map[string]any{"tenant": "initech", "groups": "agentry-admin"}, "initech", true},
	} {
		tok := p.AuthorizationCode(t, c, rig.cfg.Audience, tc.subject, tc.claims)
		who, err := rig.auth.Authenticate(bearerReq(tok))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if who.Tenant != tc.tenant || who.Principal != tc.subject || who.AdminOf(tc.tenant) != tc.admin || who.AdminOf("acme") {
			t.Fatalf("%s: %+v", tc.name, who)
		}
		f.tokens[tc.subject] = tok
	}
	// Through the API: dana, globex's admin, reads erin's conversation
	// there, and nothing of acme's; erin may not read the tenant's.
	erins := f.open("erin")
	f.open("alice") // acme, through the tokens file
	list := f.do("GET", "/v1/tenants/globex/sessions", "dana", nil)
	want(t, list, http.StatusOK, "")
	if ss := list.json(t)["sessions"].([]any); len(ss) != 1 || ss[0].(map[string]any)["sessionId"] != erins || ss[0].(map[string]any)["principal"] != "erin" {
		t.Fatalf("globex's conversations for dana: %s", list.body)
	}
	want(t, f.do("GET", "/v1/tenants/acme/sessions", "dana", nil), http.StatusNotFound, "not_found")
	want(t, f.do("GET", "/v1/tenants/globex/sessions", "erin", nil), http.StatusForbidden, "forbidden")
	want(t, f.do("GET", "/v1/sessions/"+erins, "dana", nil), http.StatusNotFound, "not_found")

	// A token without the tenant claim, or with one that is no name, is
	// refused by the claim's name.
	tok := p.AuthorizationCode(t, c, rig.cfg.Audience, "gus", map[string]any{"groups": []string{"agentry-admin"}})
	_, err := rig.auth.Authenticate(bearerReq(tok))
	refusedWith(t, "no tenant claim", err, host.CodeClaimMissing, tok)
	if !strings.Contains(err.Error(), `"tenant"`) {
		t.Fatalf("the refusal does not name the claim: %v", err)
	}
	tok = p.AuthorizationCode(t, c, rig.cfg.Audience, "hal", map[string]any{"tenant": "two words"})
	_, err = rig.auth.Authenticate(bearerReq(tok))
	refusedWith(t, "a tenant with a space", err, host.CodeClaimInvalid, tok)
	if strings.Contains(err.Error(), "two words") {
		t.Fatalf("the refusal repeats the claim's value: %v", err)
	}
}

// Tokens Hydra did not issue for this service, or that were changed on
// the way, are refused, each with its code, through the API: 401, a
// challenge, the code in the body and nothing of the token.
func TestOIDCRefusesTokensItShouldNot(t *testing.T) {
	p := hydratest.Shared(t)
	rig := newOIDCRig(t, p, nil)
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{rig.cfg.Audience, "another-service"}})
	good := p.ClientCredentials(t, c, rig.cfg.Audience)
	if _, err := rig.auth.Authenticate(bearerReq(good)); err != nil {
		t.Fatalf("a good token: %v", err)
	}
	header, payload, sig := splitJWT(t, good)
	kid := headerOf(t, header)["kid"].(string)
	pub := publishedKey(t, p, kid)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	claims := claimsOf(t, payload)
	tampered := claimsOf(t, payload)
	tampered["sub"] = "someone-else"

	f := newFixture(t, config{auth: rig.auth})
	for _, tc := range []struct {
		name string
		tok  string
		code host.Code
	}{
		{"wrong audience", p.ClientCredentials(t, c, "another-service"), host.CodeWrongAudience},
		{"alg none", enc(map[string]any{"alg": "none", "typ": "JWT", "kid": kid}) + "." + payload + ".", host.CodeInvalidToken},
		{"alg none, no signature part", enc(map[string]any{"alg": "none"}) + "." + payload, ""}, // not a JWT: not this link's
		{"HMAC with the public key in PEM", sign(t, jose.HS256, pemKey, kid, claims), host.CodeInvalidToken},
		{"HMAC with the public key in DER", sign(t, jose.HS256, der, kid, claims), host.CodeInvalidToken},
		{"tampered payload", header + "." + enc(tampered) + "." + sig, host.CodeInvalidToken},
		{"signature of another token", header + "." + payload + "." + sig[:len(sig)-4] + "AAAA", host.CodeInvalidToken},
		{"unknown key id", sign(t, jose.RS256, stranger, "not-"+kid, claims), host.CodeUnknownKey},
		{"a stranger's key under a known id", sign(t, jose.RS256, stranger, kid, claims), host.CodeInvalidToken},
		{"not base64", header + ".!!!." + sig, host.CodeInvalidToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rig.auth.Authenticate(bearerReq(tc.tok))
			refusedWith(t, tc.name, err, tc.code, tc.tok)
			f.tokens["x"] = tc.tok
			r := f.do("GET", "/v1/sessions", "x", nil)
			code := cmp.Or(tc.code, host.CodeInvalidToken)
			want(t, r, http.StatusUnauthorized, string(code))
			if !strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
				t.Fatalf("challenge %q", r.header.Get("WWW-Authenticate"))
			}
			for _, part := range strings.Split(tc.tok, ".") {
				if len(part) > 8 && strings.Contains(string(r.body), part) {
					t.Fatalf("the answer repeats the token: %s", r.body)
				}
			}
		})
	}

	// Expired: the same good token, an hour and a minute later (past its
	// life and the leeway); within the leeway it still holds.
	exp := time.Unix(int64(claims["exp"].(float64)), 0)
	rig.clock.advance(exp.Sub(rig.clock.Now()) + 20*time.Second)
	if _, err := rig.auth.Authenticate(bearerReq(good)); err != nil {
		t.Fatalf("20s past exp, within the leeway: %v", err)
	}
	rig.clock.advance(time.Minute)
	_, err = rig.auth.Authenticate(bearerReq(good))
	refusedWith(t, "expired", err, host.CodeTokenExpired, good)
	f.tokens["x"] = good
	want(t, f.do("GET", "/v1/sessions", "x", nil), http.StatusUnauthorized, "token_expired")

	// A bearer token that is not a JWT is another link's to judge: a plain
	// refusal, and the tokens file beside it still proves alice.
	if _, err := rig.auth.Authenticate(bearerReq(f.tokens["alice"])); err != host.ErrBadCredentials {
		t.Fatalf("a tokens-file token: %v", err)
	}
	want(t, f.do("GET", "/v1/sessions", "alice", nil), http.StatusOK, "")
}

// Made-up key ids cannot make the host hammer the provider: the keys are
// fetched again for an unknown id at most once per refresh floor.
func TestOIDCBoundsKeyFetches(t *testing.T) {
	p := hydratest.Shared(t)
	rig := newOIDCRig(t, p, nil)
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{rig.cfg.Audience}})
	_, payload, _ := splitJWT(t, p.ClientCredentials(t, c, rig.cfg.Audience))
	claims := claimsOf(t, payload)
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if n := rig.requests.count(jwksPath); n != 1 {
		t.Fatalf("%d key fetches at start, want 1", n)
	}
	// Within the floor of the first fetch: no fetch at all.
	var wg sync.WaitGroup
	var unknown atomic.Int32
	for i := range 50 {
		wg.Go(func() {
			tok := sign(t, jose.RS256, stranger, "made-up-"+string(rune('a'+i%26)), claims)
			var ce *host.CredentialError
			if _, err := rig.auth.Authenticate(bearerReq(tok)); errors.As(err, &ce) && ce.Code == host.CodeUnknownKey {
				unknown.Add(1)
			}
		})
	}
	wg.Wait()
	if n := rig.requests.count(jwksPath); n != 1 || unknown.Load() != 50 {
		t.Fatalf("%d key fetches, %d unknown-key refusals, want 1 and 50", n, unknown.Load())
	}
	// Past the floor: one more fetch, shared by every caller at once.
	rig.clock.advance(host.DefaultOIDCRefreshFloor + time.Second)
	for i := range 50 {
		wg.Go(func() {
			_, _ = rig.auth.Authenticate(bearerReq(sign(t, jose.RS256, stranger, "made-up-again-"+string(rune('a'+i%26)), claims)))
		})
	}
	wg.Wait()
	if n := rig.requests.count(jwksPath); n != 2 {
		t.Fatalf("%d key fetches after the floor, want 2", n)
	}
	// Keys past their age are fetched again before use.
	tok := p.ClientCredentials(t, c, rig.cfg.Audience)
	rig.clock.advance(host.DefaultOIDCKeysMaxAge)
	if _, err := rig.auth.Authenticate(bearerReq(tok)); err != nil {
		t.Fatal(err)
	}
	if n := rig.requests.count(jwksPath); n != 3 {
		t.Fatalf("%d key fetches after the keys aged, want 3", n)
	}
}

// A provider of the test's own: a token of another issuer signed with the
// very same keys is refused as such; a key rotation at the provider is
// picked up without a restart; and once the provider stops, requests
// that need its keys answer 503 identity_unavailable, not 401.
func TestOIDCProviderRotatesKeysAndStops(t *testing.T) {
	p := hydratest.Start(t, hydratest.Options{})
	rig := newOIDCRig(t, p, nil)
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{rig.cfg.Audience}})
	f := newFixture(t, config{auth: rig.auth})
	f.tokens["svc"] = p.ClientCredentials(t, c, rig.cfg.Audience)
	id := f.open("svc")

	t.Run("wrong issuer", func(t *testing.T) {
		twin := hydratest.Start(t, hydratest.Options{SameKeys: p})
		tc := twin.NewClient(t, hydratest.ClientOptions{Audience: []string{rig.cfg.Audience}})
		tok := twin.ClientCredentials(t, tc, rig.cfg.Audience)
		_, err := rig.auth.Authenticate(bearerReq(tok))
		refusedWith(t, "another issuer", err, host.CodeWrongIssuer, tok)
	})

	t.Run("rotation", func(t *testing.T) {
		before := rig.requests.count(jwksPath)
		kid := p.RotateKeys(t)
		tok := p.ClientCredentials(t, c, rig.cfg.Audience)
		header, _, _ := splitJWT(t, tok)
		if got := headerOf(t, header)["kid"]; got != kid {
			t.Fatalf("the provider signs with %v, not the new key %s", got, kid)
		}
		rig.clock.advance(host.DefaultOIDCRefreshFloor + time.Second)
		f.tokens["svc"] = tok
		want(t, f.do("GET", "/v1/sessions/"+id, "svc", nil), http.StatusOK, "")
		if n := rig.requests.count(jwksPath); n != before+1 {
			t.Fatalf("%d key fetches, want %d", n, before+1)
		}
	})

	t.Run("stopped", func(t *testing.T) {
		p.Stop()
		// The keys held still verify until they age; then the provider
		// must be asked, and cannot be.
		want(t, f.do("GET", "/v1/sessions/"+id, "svc", nil), http.StatusOK, "")
		rig.clock.advance(host.DefaultOIDCKeysMaxAge)
		r := f.do("GET", "/v1/sessions/"+id, "svc", nil)
		want(t, r, http.StatusServiceUnavailable, "identity_unavailable")
		if r.header.Get("Retry-After") == "" || r.header.Get("WWW-Authenticate") != "" {
			t.Fatalf("headers %v", r.header)
		}
		if strings.Contains(string(r.body), f.tokens["svc"][:20]) || strings.Contains(string(r.body), p.Issuer) {
			t.Fatalf("the answer says too much: %s", r.body)
		}
		// Within the floor the failure stands without a new attempt; a
		// token-file caller is not affected.
		n := rig.requests.count(jwksPath)
		want(t, f.do("POST", "/v1/sessions", "svc", nil), http.StatusServiceUnavailable, "identity_unavailable")
		if rig.requests.count(jwksPath) != n {
			t.Fatal("the provider was asked again within the floor")
		}
		want(t, f.do("GET", "/v1/sessions", "alice", nil), http.StatusOK, "")
		logged := rig.log.String()
		if strings.Count(logged, "cannot be fetched") != 1 || strings.Contains(logged, f.tokens["svc"][:20]) {
			t.Fatalf("the log, once per failed fetch and without the token:\n%s", logged)
		}
	})
}

// NewOIDC refuses a configuration that cannot work, naming the fix.
func TestNewOIDCRefusesWhatCannotWork(t *testing.T) {
	p := hydratest.Shared(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	for _, tc := range []struct {
		cfg  host.OIDCConfig
		want string
	}{
		{host.OIDCConfig{Issuer: p.Issuer, Tenant: "acme"}, "--oidc-audience"},
		{host.OIDCConfig{Issuer: "http://idp.example.com/", Audience: "a", Tenant: "acme"}, "https"},
		{host.OIDCConfig{Issuer: "idp.example.com", Audience: "a", Tenant: "acme"}, "absolute https"},
		{host.OIDCConfig{Issuer: p.Issuer, Audience: "a"}, "--oidc-tenant-claim"},
		{host.OIDCConfig{Issuer: p.Issuer, Audience: "a", Tenant: "acme", TenantClaim: "org"}, "not both"},
		{host.OIDCConfig{Issuer: p.Issuer, Audience: "a", Tenant: "a b"}, "without spaces"},
		{host.OIDCConfig{Issuer: strings.TrimSuffix(p.Issuer, "/"), Audience: "a", Tenant: "acme"}, "exactly as its discovery document names it"},
		{host.OIDCConfig{Issuer: "http://127.0.0.1:9/", Audience: "a", Tenant: "acme"}, "discovering"},
	} {
		_, err := host.NewOIDC(t.Context(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

func splitJWT(t *testing.T, tok string) (header, payload, sig string) {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	return parts[0], parts[1], parts[2]
}

func decodeSegment(t *testing.T, seg string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func headerOf(t *testing.T, seg string) map[string]any { return decodeSegment(t, seg) }
func claimsOf(t *testing.T, seg string) map[string]any { return decodeSegment(t, seg) }

func enc(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sign makes a compact JWS of claims with key, naming kid.
func sign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	jws, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// publishedKey is the provider's public key with id kid, as it publishes it.
func publishedKey(t *testing.T, p *hydratest.Provider, kid string) *rsa.PublicKey {
	t.Helper()
	res, err := http.Get(p.Issuer + strings.TrimPrefix(jwksPath, "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(res.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	for _, k := range set.Key(kid) {
		if pk, ok := k.Key.(*rsa.PublicKey); ok {
			return pk
		}
	}
	t.Fatalf("the provider publishes no RSA key %s", kid)
	return nil
}

// With a client id, the console is told how to sign in at the provider,
// and its policy lets the page reach the provider's token endpoint, that
// URL exactly, and nothing else of the provider; without one it is told
// there is no such sign-in, and connects to the host only.
func TestConsoleSignInConfigAndPolicy(t *testing.T) {
	p := hydratest.Shared(t)
	rig := newOIDCRig(t, p, func(c *host.OIDCConfig) { c.ClientID = "console-client" })
	f := newFixture(t, config{auth: rig.auth})
	r := f.do("GET", "/console/sign-in.json", "", nil)
	want(t, r, http.StatusOK, "")
	var got struct {
		OIDC map[string]any `json:"oidc"`
	}
	decode(t, r, &got)
	tokenURL := p.Issuer + "oauth2/token"
	if got.OIDC["clientId"] != "console-client" || got.OIDC["issuer"] != p.Issuer || got.OIDC["tokenEndpoint"] != tokenURL ||
		got.OIDC["authorizationEndpoint"] != p.Issuer+"oauth2/auth" || got.OIDC["audience"] != rig.cfg.Audience {
		t.Fatalf("sign-in: %s", r.body)
	}
	if strings.Contains(string(r.body), "secret") {
		t.Fatalf("the sign-in configuration mentions a secret: %s", r.body)
	}
	page := f.do("GET", "/", "", nil)
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self' "+tokenURL+";") || strings.Contains(csp, "oauth2/auth") {
		t.Fatalf("the console's policy: %s", csp)
	}

	plain := newFixture(t, config{})
	r = plain.do("GET", "/console/sign-in.json", "", nil)
	want(t, r, http.StatusOK, "")
	if strings.TrimSpace(string(r.body)) != `{"oidc":null}` {
		t.Fatalf("sign-in without a provider: %s", r.body)
	}
	if csp := plain.do("GET", "/", "", nil).header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self';") {
		t.Fatalf("the console's policy without a provider: %s", csp)
	}
}
