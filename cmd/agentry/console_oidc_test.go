package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/internal/hydratest"
)

// testClock is a settable clock for the host to judge tokens by.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) set(off time.Duration) {
	c.mu.Lock()
	c.off = off
	c.mu.Unlock()
}

// loginPages are the identity provider's login and consent pages, as a
// provider's own would be, except that nobody types: each accepts the
// request through Hydra's admin API, as subject with the claims given.
func loginPages(t *testing.T, p **hydratest.Provider, subject string, claims map[string]any) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	logins := 0
	mux := http.NewServeMux()
	accept := func(w http.ResponseWriter, r *http.Request, next string, err error) {
		if err != nil {
			t.Errorf("%s: %v", r.URL.Path, err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		http.Redirect(w, r, next, http.StatusFound)
	}
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		logins++
		mu.Unlock()
		next, err := (*p).AcceptLogin(r.URL.Query().Get("login_challenge"), subject)
		accept(w, r, next, err)
	})
	mux.HandleFunc("GET /consent", func(w http.ResponseWriter, r *http.Request) {
		next, err := (*p).AcceptConsent(r.URL.Query().Get("consent_challenge"), claims)
		accept(w, r, next, err)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// untilBack is until for a page that navigates away and back on its own
// (to the provider and back): a check that meets a page being replaced
// (the protocol then fails it in one of several ways) is asked again of
// the next one, until the step's deadline.
func (b *tab) untilBack(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(step)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, step)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(time.Until(deadline))))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
			text, _ := chromedp.Run(context.WithoutCancel(b.ctx), chromedp.Evaluate[string]("document.body.innerText"))
			b.t.Fatalf("%s: %v\nthe page says:\n%s", what, err, text)
		}
	}
}

// The console signs a person in at a real OpenID provider (Hydra, its
// login and consent accepted as a login page would), in headless
// Chromium: the authorization code flow with PKCE as a public client,
// the code taken out of the address at once, the token fetched from the
// provider's token endpoint (which the page's policy lets it reach, and
// nothing else) and kept only in sessionStorage and the Authorization
// header. A turn runs. When the token expires the person is asked to sign
// in again, and the message the host refused comes back with the
// conversation after the provider's round trip; a turn running when the
// token expires is not lost: its answer is there after signing in again.
// The token never appears
// in a URL, the history, the page's storage beyond sessionStorage, or a
// line serve printed or the events file.
func TestConsoleSignsInAtTheProvider(t *testing.T) {
	needPython(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // serve listens here; the provider must know the console's origin first
	origin := "http://" + addr

	var p *hydratest.Provider
	pages := loginPages(t, &p, "dana", map[string]any{"tenant": "acme", "groups": []string{"agentry-admin"}})
	p = hydratest.Start(t, hydratest.Options{LoginURL: pages.URL + "/login", ConsentURL: pages.URL + "/consent", CORSOrigins: []string{origin}})
	aud := "agentry-console"
	c := p.NewClient(t, hydratest.ClientOptions{Audience: []string{aud}, Redirect: origin + "/", CORSOrigins: []string{origin}})

	clock := &testClock{}
	tokens, _ := writeTokens(t, "alice")
	o := serveDefaults(t)
	o.addr, o.tokens = addr, tokens
	o.events = filepath.Join(t.TempDir(), "events.ndjson")
	o.runner = "interpreter"
	if jailWorks() {
		o.runner = "jail"
	} else {
		o.allowUnjailed = true
	}
	o.oidc = oidcFlags{issuer: p.Issuer, audience: aud, clientID: c.ID, scopes: []string{"openid"},
		tenantClaim: "tenant", principalClaim: "sub", rolesClaim: "groups", adminRole: host.DefaultOIDCAdminRole, now: clock.Now}
	s := startServe(t, o)

	actx := browser(t)
	b := openTab(t, actx, artifactDir(t))
	b.do("open the console", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.ID("oidc-signin")))
	if label := b.text("#oidc-signin"); !strings.Contains(label, strings.TrimSuffix(strings.TrimPrefix(p.Issuer, "http://"), "/")) {
		t.Fatalf("the sign-in button says %q", label)
	}
	b.shot("1-sign-in")
	b.do("sign in at the provider", chromedp.Click(chromedp.ID("oidc-signin")))
	b.untilBack("signed in", `!document.getElementById("app").hidden`)
	if who := b.text("#who"); !strings.Contains(who, "dana") || !strings.Contains(who, "acme") || !strings.Contains(who, "admin") {
		t.Fatalf("signed in as %q", who)
	}
	if href := eval[string](b, "location.href"); href != origin+"/" {
		t.Fatalf("the address after sign-in: %q (the code and state must leave it)", href)
	}
	tok := eval[string](b, `sessionStorage.getItem("agentry.token") || ""`)
	if strings.Count(tok, ".") != 2 {
		t.Fatalf("the tab holds no JWT: %q", tok)
	}
	if flow := eval[string](b, `sessionStorage.getItem("agentry.signin") || ""`); flow != "" {
		t.Fatal("the sign-in's verifier outlived the sign-in")
	}

	// A turn.
	b.do("start a conversation", chromedp.Click(chromedp.ID("new-conv")), chromedp.WaitVisible(chromedp.ID("conv-body")))
	id := strings.TrimPrefix(eval[string](b, "location.hash"), "#")
	b.do("send code", chromedp.SendKeys(chromedp.ID("message"), "print(6*7)"), chromedp.Click(chromedp.ID("send")))
	b.until("the answer", `document.getElementById("live-text").textContent === "42"`)
	b.shot("2-answered")
	b.tokenStaysHidden(tok)

	// The token expires: the next message is refused, the person is asked
	// to sign in again, and the message waits in the composer.
	clock.set(3 * time.Hour)
	b.do("send with an expired token", chromedp.SendKeys(chromedp.ID("message"), "print(7*7)"), chromedp.Click(chromedp.ID("send")))
	b.until("asked to sign in again", `!document.getElementById("signin").hidden && document.getElementById("signin-error").textContent.includes("expired")`)
	if draft := eval[string](b, `document.getElementById("message").value`); draft != "print(7*7)" {
		t.Fatalf("the refused message is gone: %q", draft)
	}
	b.shot("3-expired")
	clock.set(0)
	b.do("sign in again", chromedp.Click(chromedp.ID("oidc-signin")))
	b.untilBack("back in the conversation", `!document.getElementById("app").hidden && location.hash === "#`+id+`" && !document.getElementById("conv-body").hidden`)
	if draft := eval[string](b, `document.getElementById("message").value`); draft != "print(7*7)" {
		t.Fatalf("the message did not come back: %q", draft)
	}
	tok2 := eval[string](b, `sessionStorage.getItem("agentry.token") || ""`)
	if tok2 == tok || strings.Count(tok2, ".") != 2 {
		t.Fatal("no new token after signing in again")
	}
	b.do("send it", chromedp.Click(chromedp.ID("send")))
	b.until("the second answer", `document.getElementById("live-text").textContent === "49"`)
	b.until("both in the transcript", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].map((e) => e.textContent).join(",") === "42,49"`)
	b.tokenStaysHidden(tok2)

	// The token expires while a turn runs: the turn goes on (its request
	// was proved when it began), and its answer is there after signing in
	// again.
	b.do("send a slow one", chromedp.SendKeys(chromedp.ID("message"), "import time; time.sleep(1.5); print(8*8)"), chromedp.Click(chromedp.ID("send")))
	b.until("the turn in flight", `document.getElementById("live-events").textContent.includes("tool run_code runs")`)
	clock.set(3 * time.Hour)
	b.until("asked to sign in again after the turn", `!document.getElementById("signin").hidden && document.getElementById("signin-error").textContent.includes("expired")`)
	clock.set(0)
	b.do("sign in once more", chromedp.Click(chromedp.ID("oidc-signin")))
	b.untilBack("the answer of the turn in flight", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].map((e) => e.textContent).join(",") === "42,49,64"`)
	tok3 := eval[string](b, `sessionStorage.getItem("agentry.token") || ""`)
	b.tokenStaysHidden(tok3)
	b.clean()
	b.shot("4-again")

	s.stop(t)
	events, err := os.ReadFile(o.events)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []string{tok, tok2, tok3} {
		sig := tk[strings.LastIndex(tk, ".")+1:]
		if strings.Contains(s.stderr.String(), sig) || strings.Contains(string(events), sig) || strings.Contains(s.stderr.String(), tk[:30]) {
			t.Fatal("a token reached serve's output or the events file")
		}
	}
}
