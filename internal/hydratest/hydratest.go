// Package hydratest gives tests a real OpenID provider: the Ory Hydra
// that .ci/hydra builds and starts (AGENTRY_TEST_HYDRA and friends name
// it), whose keys no test changes, or a provider of a test's own on a
// database of its own (copied from the migrated template .ci/hydra
// keeps): one it stops, whose keys it rotates, or whose login and consent
// pages it serves. Every token a
// test accepts comes from Hydra through its public OAuth 2.0 endpoints;
// the admin API only registers clients, rotates keys and accepts login
// and consent, as a provider's own login page would.
package hydratest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// Provider is one running Hydra.
type Provider struct {
	// Issuer is its issuer URL (with the trailing slash Hydra gives it);
	// Admin is its admin API.
	Issuer, Admin string

	dsn      string       // of a provider of the test's own
	http     *http.Client // its own connections, closed when the test ends
	stopOnce sync.Once
	stop     func()
}

func need(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is unset under CI=true: run .ci/hydra (after .ci/postgres) and export what it prints", name)
		}
		t.Skipf("SKIPPING: this test needs Ory Hydra and %s is unset (run eval \"$(.ci/postgres)\"; eval \"$(.ci/hydra)\")", name)
	}
	return v
}

// Shared returns the Hydra .ci/hydra started. Without one the test is
// skipped, loudly — and under CI=true it fails instead.
func Shared(t testing.TB) *Provider {
	t.Helper()
	return withClient(t, &Provider{Issuer: need(t, "AGENTRY_TEST_HYDRA"), Admin: strings.TrimSuffix(need(t, "AGENTRY_TEST_HYDRA_ADMIN"), "/")})
}

// withClient gives p a client of its own, whose idle connections close
// when the test ends (no goroutine of it outlives the test).
func withClient(t testing.TB, p *Provider) *Provider {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	p.http = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return p
}

// Options configure an instance of a test's own.
type Options struct {
	// LoginURL and ConsentURL are the pages Hydra sends a person to
	// (default: pages nobody serves; a test that drives the flow itself
	// reads the challenge from the redirect).
	LoginURL, ConsentURL string
	// CORSOrigins may call the public endpoints from a browser (the
	// console exchanging its code at the token endpoint).
	CORSOrigins []string
	// SameKeys, when set, runs on that provider's database: another
	// issuer that signs with the very same keys.
	SameKeys *Provider
}

// Start runs a Hydra of the test's own on free loopback ports and a
// database of its own (dropped at the test's end), until Stop or the
// test's end.
func Start(t testing.TB, o Options) *Provider {
	t.Helper()
	bin, config := need(t, "AGENTRY_TEST_HYDRA_BIN"), need(t, "AGENTRY_TEST_HYDRA_CONFIG")
	dsn := ""
	if o.SameKeys != nil {
		dsn = o.SameKeys.dsn
	} else {
		dsn = database(t, need(t, "AGENTRY_TEST_HYDRA_TEMPLATE"))
	}
	public, admin := freePort(t), freePort(t)
	issuer := "http://" + public + "/"
	if o.LoginURL == "" {
		o.LoginURL = issuer + "login-not-served"
	}
	if o.ConsentURL == "" {
		o.ConsentURL = issuer + "consent-not-served"
	}
	ph, pp, _ := net.SplitHostPort(public)
	ah, ap, _ := net.SplitHostPort(admin)
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out", "--config", config)
	cmd.Env = append(os.Environ(), "DSN="+dsn, "URLS_SELF_ISSUER="+issuer, "URLS_LOGIN="+o.LoginURL, "URLS_CONSENT="+o.ConsentURL,
		"SERVE_PUBLIC_HOST="+ph, "SERVE_PUBLIC_PORT="+pp, "SERVE_ADMIN_HOST="+ah, "SERVE_ADMIN_PORT="+ap)
	if len(o.CORSOrigins) > 0 {
		cmd.Env = append(cmd.Env, "SERVE_PUBLIC_CORS_ENABLED=true", "SERVE_PUBLIC_CORS_ALLOWED_ORIGINS="+strings.Join(o.CORSOrigins, ","))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting hydra: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := withClient(t, &Provider{Issuer: issuer, Admin: "http://" + admin, dsn: dsn})
	p.stop = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(p.Stop)
	if err := p.ready(exited); err != nil {
		p.Stop()
		t.Fatalf("hydra did not start: %v\n%s", err, out.String())
	}
	// A new database has no keys yet: Hydra makes them (4096-bit RSA) on
	// the first request for them, which on a loaded machine takes longer
	// than a verifier waits. Made here, they are there when the test
	// begins.
	warm := &http.Client{Transport: p.http.Transport, Timeout: 2 * time.Minute}
	res, err := warm.Get(p.Issuer + ".well-known/jwks.json")
	if err != nil {
		p.Stop()
		t.Fatalf("hydra made no keys: %v\n%s", err, out.String())
	}
	res.Body.Close()
	return p
}

// Stop ends an instance of the test's own (the shared one is not the
// test's to stop). It returns once the process has exited.
func (p *Provider) Stop() {
	if p.stop != nil {
		p.stopOnce.Do(p.stop)
	}
}

// ready waits until both of Hydra's servers answer: Hydra says nothing a
// test could wait on, so its health endpoints are asked, briefly apart.
func (p *Provider) ready(exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if p.ok(p.Admin+"/health/ready") && p.ok(p.Issuer+".well-known/openid-configuration") {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("it exited")
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within 30s")
		}
	}
}

func (p *Provider) ok(u string) bool {
	res, err := p.http.Get(u)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// database copies the template into a database of the test's own and
// returns its DSN. The copy is dropped when the test ends, after the
// provider on it has stopped (cleanups run last-registered first).
func database(t testing.TB, template string) string {
	t.Helper()
	u, err := url.Parse(template)
	if err != nil {
		t.Fatalf("AGENTRY_TEST_HYDRA_TEMPLATE: %v", err)
	}
	// Connected to another database: a template with a session on it
	// cannot be copied.
	server := *u
	server.Path = "/postgres"
	db, err := sql.Open("pgx", server.String())
	if err != nil {
		t.Fatal(err)
	}
	name := "agentry_hydra_t_" + random(6)
	if _, err := db.Exec("CREATE DATABASE " + name + " TEMPLATE " + strings.TrimPrefix(u.Path, "/")); err != nil {
		db.Close()
		t.Fatalf("copying hydra's template database: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Client is an OAuth 2.0 client registered at the provider.
type Client struct {
	ID, Secret string // Secret is empty for a public client
	Redirect   string
}

// ClientOptions describe a client to register.
type ClientOptions struct {
	// Audience lists the audiences its tokens may be for.
	Audience []string
	// Redirect, when set, makes it a public client (no secret) for the
	// authorization code flow with PKCE, sending people back there.
	Redirect string
	// CORSOrigins may use it from a browser.
	CORSOrigins []string
}

// NewClient registers a client whose access tokens are JWTs, removed when
// the test ends.
func (p *Provider) NewClient(t testing.TB, o ClientOptions) Client {
	t.Helper()
	c := Client{ID: "agentry-test-" + random(6), Redirect: o.Redirect}
	body := map[string]any{
		"client_id": c.ID, "access_token_strategy": "jwt", "audience": o.Audience, "scope": "openid",
		"allowed_cors_origins": o.CORSOrigins,
	}
	if o.Redirect == "" {
		c.Secret = random(24)
		body["client_secret"] = c.Secret
		body["grant_types"] = []string{"client_credentials"}
		body["token_endpoint_auth_method"] = "client_secret_post"
	} else {
		body["grant_types"] = []string{"authorization_code"}
		body["response_types"] = []string{"code"}
		body["redirect_uris"] = []string{o.Redirect}
		body["token_endpoint_auth_method"] = "none"
	}
	if err := p.admin(http.MethodPost, "/admin/clients", body, nil); err != nil {
		t.Fatalf("registering a client: %v", err)
	}
	t.Cleanup(func() { _ = p.admin(http.MethodDelete, "/admin/clients/"+c.ID, nil, nil) })
	return c
}

// ClientCredentials gets an access token for the client itself, for
// audience.
func (p *Provider) ClientCredentials(t testing.TB, c Client, audience string) string {
	t.Helper()
	tok, err := p.token(url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {c.Secret}, "audience": {audience}})
	if err != nil {
		t.Fatalf("client credentials: %v", err)
	}
	return tok
}

// AuthorizationCode signs subject in through the authorization code flow
// with PKCE, as a browser would (following redirects, keeping cookies),
// accepting login and consent through the admin API with claims put in
// the access token; it returns the access token.
func (p *Provider) AuthorizationCode(t testing.TB, c Client, audience, subject string, claims map[string]any) string {
	t.Helper()
	tok, err := p.authorizationCode(c, audience, subject, claims)
	if err != nil {
		t.Fatalf("authorization code flow: %v", err)
	}
	return tok
}

func (p *Provider) authorizationCode(c Client, audience, subject string, claims map[string]any) (string, error) {
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: p.http.Transport, Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	verifier := random(32)
	sum := sha256.Sum256([]byte(verifier))
	state := random(12)
	next := p.Issuer + "oauth2/auth?" + url.Values{
		"response_type": {"code"}, "client_id": {c.ID}, "redirect_uri": {c.Redirect}, "scope": {"openid"},
		"audience": {audience}, "state": {state}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}.Encode()
	for range 10 {
		res, err := browser.Get(next)
		if err != nil {
			return "", err
		}
		res.Body.Close()
		loc, err := res.Location()
		if err != nil {
			return "", fmt.Errorf("GET %s answered %s without a redirect", next, res.Status)
		}
		q := loc.Query()
		switch {
		case q.Get("login_challenge") != "":
			next, err = p.AcceptLogin(q.Get("login_challenge"), subject)
		case q.Get("consent_challenge") != "":
			next, err = p.AcceptConsent(q.Get("consent_challenge"), claims)
		case q.Get("code") != "":
			if q.Get("state") != state {
				return "", fmt.Errorf("the state came back changed")
			}
			return p.token(url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")}, "client_id": {c.ID},
				"redirect_uri": {c.Redirect}, "code_verifier": {verifier}})
		case q.Get("error") != "":
			return "", fmt.Errorf("the provider refused: %s: %s", q.Get("error"), q.Get("error_description"))
		default:
			next = loc.String()
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("too many redirects")
}

// AcceptLogin accepts a login request as subject and returns where the
// person's browser goes next.
func (p *Provider) AcceptLogin(challenge, subject string) (string, error) {
	var out struct {
		RedirectTo string `json:"redirect_to"`
	}
	err := p.admin(http.MethodPut, "/admin/oauth2/auth/requests/login/accept?login_challenge="+url.QueryEscape(challenge),
		map[string]any{"subject": subject}, &out)
	return out.RedirectTo, err
}

// AcceptConsent grants a consent request what it asked for, with claims
// for the access token, and returns where the person's browser goes next.
func (p *Provider) AcceptConsent(challenge string, claims map[string]any) (string, error) {
	var req struct {
		Scope    []string `json:"requested_scope"`
		Audience []string `json:"requested_access_token_audience"`
	}
	if err := p.admin(http.MethodGet, "/admin/oauth2/auth/requests/consent?consent_challenge="+url.QueryEscape(challenge), nil, &req); err != nil {
		return "", err
	}
	var out struct {
		RedirectTo string `json:"redirect_to"`
	}
	err := p.admin(http.MethodPut, "/admin/oauth2/auth/requests/consent/accept?consent_challenge="+url.QueryEscape(challenge), map[string]any{
		"grant_scope": req.Scope, "grant_access_token_audience": req.Audience,
		"session": map[string]any{"access_token": claims},
	}, &out)
	return out.RedirectTo, err
}

// RotateKeys makes the provider sign access tokens with a new key from
// now on (the old one stays published) and returns the new key's id.
func (p *Provider) RotateKeys(t testing.TB) string {
	t.Helper()
	kid := "rotated-" + random(6)
	var out struct {
		Keys []struct {
			KeyID string `json:"kid"`
		} `json:"keys"`
	}
	if err := p.admin(http.MethodPost, "/admin/keys/hydra.jwt.access-token", map[string]any{"alg": "RS256", "use": "sig", "kid": kid}, &out); err != nil {
		t.Fatalf("rotating the access token key: %v", err)
	}
	if len(out.Keys) == 0 || out.Keys[0].KeyID != kid {
		t.Fatalf("the new key: %+v", out.Keys)
	}
	return kid
}

func (p *Provider) token(form url.Values) (string, error) {
	res, err := p.http.PostForm(p.Issuer+"oauth2/token", form)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || out.AccessToken == "" {
		return "", fmt.Errorf("the token endpoint answered %s: %s %s (%v)", res.Status, out.Error, out.Description, err)
	}
	return out.AccessToken, nil
}

func (p *Provider) admin(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.Admin+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s answered %s: %s", method, path, res.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
