package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/internal/hydratest"
)

// jailOrAllow is what a door that admits several principals needs here:
// the jail where it works, or the override.
func jailOrAllow() []string {
	if jailWorks() {
		return []string{"--runner", "jail"}
	}
	return []string{"--allow-unjailed"}
}

// The built binary with --oidc-issuer beside a tokens file: a token from
// the provider proves its client (in the fixed tenant), the tokens file
// keeps working, a token meant for another service is refused with its
// code, and no token is ever printed.
func TestServeBinaryAcceptsOIDCBesideTokens(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	p := hydratest.Shared(t)
	aud := "agentry-serve-" + strings.ReplaceAll(t.Name(), "/", "-")
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{aud, "another-service"}})
	jwt := p.ClientCredentials(t, c, aud)
	other := p.ClientCredentials(t, c, "another-service")
	tokens, toks := writeTokens(t, "alice")

	bin := binary(t)
	args := append([]string{"--tokens", tokens, "--store", filepath.Join(t.TempDir(), "a.db"), "--events", "",
		"--oidc-issuer", p.Issuer, "--oidc-audience", aud, "--oidc-tenant", "acme"}, jailOrAllow()...)
	s := startServeBinary(t, bin, nil, args...)

	s.token = jwt
	code, body := s.call(t, "GET", "/v1/me", "")
	var me map[string]string
	_ = json.Unmarshal(body, &me)
	if code != 200 || me["tenant"] != "acme" || me["principal"] != c.ID {
		t.Fatalf("/v1/me with the provider's token: %d %s", code, body)
	}
	if code, body := s.call(t, "POST", "/v1/sessions", "{}"); code != 201 {
		t.Fatalf("open with the provider's token: %d %s", code, body)
	}
	s.token = toks["alice"]
	if code, body := s.call(t, "POST", "/v1/sessions", "{}"); code != 201 {
		t.Fatalf("open with the tokens file's: %d %s", code, body)
	}
	s.token = other
	code, body = s.call(t, "GET", "/v1/sessions", "")
	if code != 401 || !strings.Contains(string(body), `"wrong_audience"`) {
		t.Fatalf("a token for another service: %d %s", code, body)
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, s.stderr)
	}
	for _, tok := range []string{jwt, other, toks["alice"]} {
		if strings.Contains(s.stderr.String(), tok[:24]) {
			t.Fatalf("a token was printed:\n%s", s.stderr)
		}
	}
}

// The --oidc-* flags refuse what cannot work, as usage errors naming the
// fix.
func TestServeOIDCFlagErrors(t *testing.T) {
	p := hydratest.Shared(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--oidc-audience", "a"}, "need --oidc-issuer"},
		{[]string{"--oidc-issuer", p.Issuer}, "--oidc-audience"},
		{[]string{"--oidc-issuer", p.Issuer, "--oidc-audience", "a", "--oidc-tenant", "x", "--oidc-tenant-claim", "org"}, "not both"},
		{[]string{"--oidc-issuer", "http://idp.example.com/", "--oidc-audience", "a"}, "https"},
		{[]string{"--oidc-issuer", "http://127.0.0.1:9/", "--oidc-audience", "a"}, "discovering"},
	} {
		_, err := execute(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--store", filepath.Join(t.TempDir(), "a.db")}, c.args...)...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error naming %s", c.args, err, c.want)
		}
	}
	if _, err := execute(t, "mcp", "--oidc-issuer", p.Issuer, "--oidc-audience", "a"); err == nil || !strings.Contains(err.Error(), "--oidc-issuer needs --http") {
		t.Errorf("mcp --oidc-issuer over stdio: %v", err)
	}
}

// agentry mcp --http with --oidc-issuer: the provider's token proves its
// caller to the tool (the events say so), a refused one gets 401 with
// nothing of it repeated.
func TestMCPHTTPWithOIDC(t *testing.T) {
	needPython(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	p := hydratest.Shared(t)
	aud := "agentry-mcp-test"
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{aud, "another-service"}})
	events := filepath.Join(t.TempDir(), "mcp.ndjson")
	addr := make(chan string, 1)
	o := mcpOptions{runner: "interpreter", http: "127.0.0.1:0", drain: 5 * time.Second, teardown: 5 * time.Second,
		listening: func(a string) { addr <- a }, allowUnjailed: !jailWorks()}
	if jailWorks() {
		o.runner = "jail"
	}
	o.oidc = oidcFlags{issuer: p.Issuer, audience: aud, tenantClaim: "", tenant: "acme", principalClaim: "sub", adminRole: host.DefaultOIDCAdminRole}
	o.sinks.events = events
	r := startMCP(t, o)
	url := "http://" + <-addr + "/mcp"

	req, _ := http.NewRequest("POST", url, strings.NewReader(`{}`))
	other := p.ClientCredentials(t, c, "another-service")
	req.Header.Set("Authorization", "Bearer "+other)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 401 || strings.Contains(string(b), other[:24]) {
		t.Fatalf("a token for another service: %d %s", res.StatusCode, b)
	}

	cl, tr := httpClient(url, p.ClientCredentials(t, c, aud))
	cs, err := cl.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, isErr := callText(t, cs, "print(6*7)"); out != "42" || isErr {
		t.Fatalf("%q, %v", out, isErr)
	}
	cs.Close()
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("stop: %v\n%s", err, r.stderr.String())
	}
	saw := 0
	for _, e := range readEvents(t, events) {
		if e.Type == code.TypeRun {
			saw++
			if e.Meta.Tenant != "acme" || e.Meta.Principal != c.ID {
				t.Fatalf("%s meta %+v, want acme/%s", e.Type, e.Meta, c.ID)
			}
		}
	}
	if saw != 1 {
		t.Fatalf("%d code runs", saw)
	}
	if !strings.Contains(r.stderr.String(), "bearer JWTs from "+p.Issuer) {
		t.Fatalf("stderr does not say whom it admits:\n%s", r.stderr.String())
	}
}
