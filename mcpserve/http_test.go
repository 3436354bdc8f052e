package mcpserve_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

var (
	alice = tool.Identity{Tenant: "acme", Principal: "alice"}
	bob   = tool.Identity{Tenant: "acme", Principal: "bob"}
	users = map[string]tool.Identity{"tok-alice-7f3a": alice, "tok-bob-91c2": bob}
)

func TestHTTPIdentityOnlyWhenProved(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	s := newServer(t, []tool.Tool{probe(), st.tool()}, rec.options(mcpserve.Options{}))
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{Authenticate: tokensOf(t, users)})

	anon, err := connectHTTP(t, srv, "")
	if err != nil {
		t.Fatalf("anonymous connect: %v", err)
	}
	if got := decodeSeen(t, call(t, anon, "probe", nil)); got.Identity != nil {
		t.Errorf("anonymous call has identity %+v", got.Identity)
	}

	for _, u := range []struct {
		token string
		want  tool.Identity
	}{{"tok-alice-7f3a", alice}, {"tok-bob-91c2", bob}} {
		cs, err := connectHTTP(t, srv, u.token)
		if err != nil {
			t.Fatalf("connect as %s: %v", u.want.Principal, err)
		}
		got := decodeSeen(t, call(t, cs, "probe", nil))
		if got.Identity == nil || *got.Identity != u.want {
			t.Errorf("identity %+v, want %+v", got.Identity, u.want)
		}
		if got.RunID != "" || got.SessionID != "" || len(got.Scopes) != 1 || got.Scopes[0] != toolsession.ScopeCall {
			t.Errorf("facts %+v: want no run, no session, scopes [call]", got)
		}
		// Sessions over HTTP are call-scoped and closed by the time the
		// answer arrives, as over any other transport.
		before := st.closes.Load()
		if res := call(t, cs, "session", nil); res.IsError {
			t.Fatalf("session call: %s", text(t, res))
		}
		if st.closes.Load() != before+1 {
			t.Errorf("cleanup count %d → %d, want one more", before, st.closes.Load())
		}
	}
	// Events name the proved principal, and nobody for the anonymous call.
	byPrincipal := map[string]int{}
	for _, e := range rec.ofType(tool.TypeCallStart) {
		if e.Meta.Principal != "" && e.Meta.Tenant != "acme" {
			t.Errorf("tool_start meta %+v", e.Meta)
		}
		byPrincipal[e.Meta.Principal]++
	}
	if byPrincipal[""] != 1 || byPrincipal["alice"] != 2 || byPrincipal["bob"] != 2 {
		t.Errorf("tool_start events by principal %v, want 1 anonymous, 2 alice, 2 bob", byPrincipal)
	}
	// So do the sessions a proved user's calls open.
	sessions := map[string]int{}
	for _, e := range rec.ofType(tool.TypeSessionStarted) {
		if e.Meta.Tenant != "acme" {
			t.Errorf("session_started meta %+v, want the caller's tenant", e.Meta)
		}
		sessions[e.Meta.Principal]++
	}
	if sessions["alice"] != 1 || sessions["bob"] != 1 || len(sessions) != 2 {
		t.Errorf("session_started events by principal %v, want one each for alice and bob", sessions)
	}
}

// headers is a round tripper that adds headers a client controls.
type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (x headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range x.h {
		r.Header[k] = v
	}
	return x.next.RoundTrip(r)
}

// Nothing a client sends but a proved credential makes an identity: not
// request metadata, not headers that look like identity.
func TestClientCannotClaimAnIdentity(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{Authenticate: tokensOf(t, users)})
	hc := &http.Client{Transport: headers{next: srv.Client().Transport, h: http.Header{
		"X-Tenant": {"acme"}, "X-Principal": {"alice"}, "X-Forwarded-User": {"alice"},
	}}}
	tr := &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mallory", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name: "probe",
		Meta: mcp.Meta{"agentry.identity": map[string]any{"tenant": "acme", "principal": "alice"}, "tenant": "acme", "principal": "alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeSeen(t, res); got.Identity != nil {
		t.Errorf("a client claimed identity %+v without credentials", got.Identity)
	}
}

func TestHTTPRequiredAuthAnswers401(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{Authenticate: tokensOf(t, users), RequireAuth: true})

	for _, tc := range []struct {
		name, header, challenge string
	}{
		{"no token", "", `Bearer realm="agentry"`},
		{"unknown token", "Bearer tok-mallory-0000", `error="invalid_token"`},
		{"not a bearer token", "Basic dG9rLWFsaWNlLTdmM2E6", `error="invalid_token"`},
		{"empty bearer", "Bearer ", `error="invalid_token"`},
	} {
		resp := postInitialize(t, srv, tc.header, "")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", tc.name, resp.StatusCode)
		}
		if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, tc.challenge) {
			t.Errorf("%s: WWW-Authenticate %q, want %q", tc.name, got, tc.challenge)
		}
		if strings.Contains(string(body), "mallory") || strings.Contains(string(body), "dG9r") {
			t.Errorf("%s: the 401 body repeats the credentials: %s", tc.name, body)
		}
	}

	if _, err := connectHTTP(t, srv, ""); err == nil {
		t.Error("the SDK client connected without a token")
	}
	if _, err := connectHTTP(t, srv, "tok-mallory-0000"); err == nil {
		t.Error("the SDK client connected with an unknown token")
	}
	cs, err := connectHTTP(t, srv, "tok-bob-91c2")
	if err != nil {
		t.Fatalf("connect with a good token: %v", err)
	}
	if got := decodeSeen(t, call(t, cs, "probe", nil)); got.Identity == nil || *got.Identity != bob {
		t.Errorf("identity %+v, want bob", got.Identity)
	}
}

// When the authenticator cannot check credentials at all (the identity
// provider is down), the door answers 503 with Retry-After: the caller's
// token may be fine, so it is not told it is bad.
func TestHTTPIdentityUnavailableAnswers503(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	down := host.Chain{refuseAll{host.ErrIdentityUnavailable}}
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{Authenticate: down.Identity, RequireAuth: true})
	resp := postInitialize(t, srv, "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp.Header.Get("WWW-Authenticate") != "" || strings.Contains(string(body), "eyJ") || !strings.Contains(string(body), "identity provider") {
		t.Fatalf("the answer: %s", body)
	}
}

// refuseAll is an authenticator that refuses every request with err.
type refuseAll struct{ err error }

func (r refuseAll) Authenticate(*http.Request) (host.Caller, error) { return host.Caller{}, r.err }

// A session opened by one user cannot be driven by another user, nor by
// nobody: the session id is caller data, never identity.
func TestHTTPSessionIsBoundToItsUser(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{Authenticate: tokensOf(t, users)})

	resp := postInitialize(t, srv, "Bearer tok-alice-7f3a", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's initialize: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("no Mcp-Session-Id from a stateful server")
	}
	for _, tc := range []struct {
		name, header string
	}{
		{"bob", "Bearer tok-bob-91c2"},
		{"nobody", ""},
	} {
		resp := postRPC(t, srv, tc.header, sid, listTools)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s using alice's session: status %d, want 403", tc.name, resp.StatusCode)
		}
	}
	resp = postRPC(t, srv, "Bearer tok-alice-7f3a", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	resp = postRPC(t, srv, "Bearer tok-alice-7f3a", sid, listTools)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"probe"`) {
		t.Errorf("alice using her own session: %d %s", resp.StatusCode, body)
	}
}

func TestHTTPAfterShutdownAnswers503(t *testing.T) {
	t.Parallel()
	s, err := mcpserve.New([]tool.Tool{probe()}, mcpserve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{})
	if _, err := connectHTTP(t, srv, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp := postInitialize(t, srv, "", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("after shutdown: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestHTTPHandlerRefusesAuthWithoutAuthenticator(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	if _, err := s.HTTPHandler(mcpserve.HTTPOptions{RequireAuth: true}); err == nil || !strings.Contains(err.Error(), "Authenticate") {
		t.Errorf("HTTPHandler: %v, want a refusal naming Authenticate", err)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	auth := tokensOf(t, users)
	for _, tc := range []struct {
		header string
		want   *tool.Identity
		bad    bool
	}{
		{"", nil, false},
		{"Bearer tok-alice-7f3a", &alice, false},
		{"bearer tok-bob-91c2", &bob, false},
		{"Bearer tok-alice-7f3", nil, true},
		{"Bearer tok-alice-7f3a extra", nil, true},
		{"Token tok-alice-7f3a", nil, true},
		{"Bearer", nil, true},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		id, err := auth(r)
		if tc.bad != (err != nil) {
			t.Errorf("%q: error %v", tc.header, err)
		}
		if (id == nil) != (tc.want == nil) || id != nil && *id != *tc.want {
			t.Errorf("%q: identity %+v, want %+v", tc.header, id, tc.want)
		}
	}
	// Each proof is a copy: a tool changing it changes nothing else.
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "Bearer tok-alice-7f3a")
	a, _ := auth(r)
	a.Tenant = "evil"
	b, _ := auth(r)
	if b.Tenant != "acme" {
		t.Error("one proved identity leaked into the next")
	}
}

// postInitialize sends a legacy (session-based) initialize request by hand.
func postInitialize(t *testing.T, srv *httptest.Server, authz, sessionID string) *http.Response {
	t.Helper()
	return postRPC(t, srv, authz, sessionID,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
}

const listTools = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

// postRPC sends one JSON-RPC message by hand.
func postRPC(t *testing.T, srv *httptest.Server, authz, sessionID, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestHTTPStatelessStillCarriesIdentity(t *testing.T) {
	t.Parallel()
	s := newServer(t, []tool.Tool{probe()}, mcpserve.Options{})
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{Authenticate: tokensOf(t, users), RequireAuth: true, Stateless: true})
	cs, err := connectHTTP(t, srv, "tok-alice-7f3a")
	if err != nil {
		t.Fatal(err)
	}
	a := decodeSeen(t, call(t, cs, "probe", nil))
	b := decodeSeen(t, call(t, cs, "probe", nil))
	if a.Identity == nil || *a.Identity != alice || b.Identity == nil || *b.Identity != alice {
		t.Errorf("identities %+v %+v, want alice", a.Identity, b.Identity)
	}
	if a.ToolCallID == b.ToolCallID {
		t.Error("two stateless calls share a tool call id")
	}
}

// A call in flight over HTTP when Shutdown begins still gets its answer;
// the HTTP sessions are closed after it.
func TestHTTPShutdownDrainsAnswersInFlight(t *testing.T) {
	t.Parallel()
	proceed := make(chan struct{})
	started := make(chan struct{})
	var closes atomic.Int32
	slow := tool.Func("slow", "holds a session until told", func(_ context.Context, c *tool.Call, _ noArgs) (string, error) {
		if _, err := c.OnTeardown(func(context.Context) error { closes.Add(1); return nil }, toolsession.Options{Scope: toolsession.ScopeCall}); err != nil {
			return "", err
		}
		close(started)
		<-proceed
		return "finished", nil
	})
	s, err := mcpserve.New([]tool.Tool{slow}, mcpserve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, s, mcpserve.HTTPOptions{})
	cs, err := connectHTTP(t, srv, "")
	if err != nil {
		t.Fatal(err)
	}
	answer := make(chan *mcp.CallToolResult, 1)
	failed := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow"})
		if err != nil {
			failed <- err
			return
		}
		answer <- res
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The server tells us when it has begun: new requests get 503.
	for i := 0; ; i++ {
		resp := postInitialize(t, srv, "", "")
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if i == 10000 {
			t.Fatal("the server never began shutting down")
		}
	}
	close(proceed)
	select {
	case res := <-answer:
		if res.IsError || text(t, res) != "finished" {
			t.Errorf("answer %s", text(t, res))
		}
	case err := <-failed:
		t.Fatalf("the call in flight lost its answer: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if closes.Load() != 1 {
		t.Errorf("cleanup ran %d times", closes.Load())
	}
}

// tokensOf admits the given tokens through agentry's one tokens
// authenticator (host.Tokens), as agentry mcp does.
func tokensOf(t *testing.T, tokens map[string]tool.Identity) mcpserve.Authenticator {
	t.Helper()
	var file strings.Builder
	for tok, id := range tokens {
		file.WriteString(host.TokenLine(tok, id) + "\n")
	}
	toks, err := host.ParseTokens(strings.NewReader(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	return host.Chain{toks}.Identity
}
