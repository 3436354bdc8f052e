package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/agentry-dev/agentry/tool"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
)

// chromiumPath finds Debian's chromium. Under CI=true a missing browser
// fails the test; elsewhere it skips, loudly.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is missing and CI=true: install it (Debian: apt-get install chromium; .ci/run does)")
	}
	t.Skip("LOUD: no chromium on PATH; the console's browser tests need it (apt-get install chromium)")
	return ""
}

// artifactDir is where screenshots go: $AGENTRY_ARTIFACTS/<test>, or a
// temporary directory. It is logged either way.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if root := os.Getenv("AGENTRY_ARTIFACTS"); root != "" {
		dir = filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// browser starts one headless chromium for the test and returns its first
// tab's context; people's tabs are opened from it with openTab.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 800),
	)
	t.Cleanup(cancel)
	// The first tab starts the browser, with no deadline (a deadline here
	// would end the browser with it); each person's tab is then opened in
	// a browser context of its own.
	root, cancelRoot := chromedp.NewContext(actx)
	t.Cleanup(cancelRoot)
	if err := chromedp.Do(root); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return root
}

// tab is one tab in a browser context of its own (its own storage, as
// another person's browser would have).
type tab struct {
	t   *testing.T
	ctx context.Context
	dir string
}

// watch records, before any page script runs, every policy violation and
// every uncaught error, so a test can assert there were none. (A script
// the DevTools protocol adds is not subject to the page's policy.)
const watch = `
window.__violations = [];
window.__errors = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
window.addEventListener("error", (e) => window.__errors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.__errors.push(String(e.reason)));
`

func openTab(t *testing.T, actx context.Context, dir string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watch})
		return err
	})); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	return &tab{t: t, ctx: ctx, dir: dir}
}

const step = 30 * time.Second

func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: %v", what, err)
	}
}

// until waits until the expression is truthy (re-checked on every DOM
// change: no sleeps).
func (b *tab) until(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(step))); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		text, _ := chromedp.Run(context.WithoutCancel(b.ctx), chromedp.Evaluate[string]("document.body.innerText"))
		focus, _ := chromedp.Run(context.WithoutCancel(b.ctx), chromedp.Evaluate[string]("document.activeElement ? document.activeElement.tagName + '#' + document.activeElement.id : 'none'"))
		b.t.Fatalf("%s: %v\nthe focus is on %s; the page says:\n%s", what, err, focus, text)
	}
}

func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (b *tab) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel))
}

func (b *tab) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), step)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("writing %s: %v", p, err)
	}
}

func (b *tab) signIn(url, token string) {
	b.t.Helper()
	b.do("open the console", chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.do("sign in",
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin-button")),
		chromedp.WaitVisible(chromedp.ID("app")))
}

// clean fails the test if the page broke its policy or threw.
func (b *tab) clean() {
	b.t.Helper()
	if v := eval[[]string](b, "window.__violations"); len(v) > 0 {
		b.t.Errorf("policy violations: %q", v)
	}
	if e := eval[[]string](b, "window.__errors"); len(e) > 0 {
		b.t.Errorf("uncaught errors: %q", e)
	}
}

// The token never leaves sessionStorage and the Authorization header: not
// in the address, the history, a request's URL, localStorage or a cookie.
func (b *tab) tokenStaysHidden(token string) {
	b.t.Helper()
	var seen struct {
		Href, Cookie, Local, Session string
		Resources                    []string
		LocalKeys                    int
	}
	raw := eval[[]byte](b, `({
		href: location.href,
		cookie: document.cookie,
		local: JSON.stringify(Object.entries(localStorage)),
		localKeys: localStorage.length,
		session: sessionStorage.getItem("agentry.token"),
		resources: performance.getEntriesByType("resource").map((e) => e.name).concat(performance.getEntriesByType("navigation").map((e) => e.name)),
	})`)
	if err := json.Unmarshal(raw, &seen); err != nil {
		b.t.Fatal(err)
	}
	if seen.Session != token {
		b.t.Errorf("sessionStorage does not hold the token the person signed in with")
	}
	if seen.LocalKeys != 0 || strings.Contains(seen.Local, token) || strings.Contains(seen.Cookie, token) || strings.Contains(seen.Href, token) {
		b.t.Errorf("the token leaked: href %q, %d localStorage keys, cookie %q", seen.Href, seen.LocalKeys, seen.Cookie)
	}
	if len(seen.Resources) < 5 {
		b.t.Errorf("only %d requests recorded: %q", len(seen.Resources), seen.Resources)
	}
	for _, u := range seen.Resources {
		if strings.Contains(u, token) || strings.Contains(u, "token=") {
			b.t.Errorf("a request's URL carries the token: %s", u)
		}
	}
}

// noOverflow checks the page fits its width: nothing to scroll sideways.
func (b *tab) noOverflow(width int) {
	b.t.Helper()
	// On a phone the layout viewport grows to fit what overflows, so the
	// width to fit is the device's, not innerWidth.
	if w := eval[int](b, "document.documentElement.scrollWidth"); w > width {
		// Name the innermost elements that stick out.
		wide := eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > %d + 1 && ![...e.children].some((c) => c.getBoundingClientRect().right > %d + 1)).slice(0, 12).map((e) => e.tagName + "#" + e.id + "." + e.className + " " + Math.round(e.getBoundingClientRect().right))`, width, width))
		b.t.Errorf("the page is %d px wide on a %d px screen; sticking out: %q", w, width, wide)
	}
}

func writeTokens(t *testing.T, who ...string) (string, map[string]string) {
	t.Helper()
	toks := map[string]string{}
	var lines []string
	for _, p := range who {
		tok, line, err := host.GenerateToken(tool.Identity{Tenant: "acme", Principal: p})
		if err != nil {
			t.Fatal(err)
		}
		toks[p] = tok
		lines = append(lines, line)
	}
	file := filepath.Join(t.TempDir(), "tokens.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, toks
}

var (
	keyHash = regexp.MustCompile(`^[0-9a-f]{12}$`)
	heldFor = regexp.MustCompile(`^[0-9.]+ (ms|s|min [0-9]+ s)$`)
)

// The console in a real headless Chromium against a real agentry serve
// (--check-in run_code, a live interpreter per conversation): alice signs
// in, starts a conversation, sends code, approves the check-in and sees
// the streamed answer, declines the next with a note (by keyboard), reads
// her tool session and a run's timeline, and closes the conversation; bob,
// in a browser of his own, sees none of it, not even by its id; the token
// stays out of every URL and out of localStorage; nothing breaks the
// page's policy.
func TestBrowserConsole(t *testing.T) {
	actx, s, toks := consoleServe(t, "alice", "bob")
	dir := artifactDir(t)

	a := openTab(t, actx, dir)
	a.signIn(s.url, toks["alice"])
	if who := a.text("#who"); !strings.Contains(who, "alice") || !strings.Contains(who, "acme") {
		t.Fatalf("signed in as %q", who)
	}
	a.until("an empty list", `!document.getElementById("convs-empty").hidden`)
	a.shot("1-signed-in")

	// Start a conversation and send code: the check-in asks first.
	a.do("start a conversation", chromedp.Click(chromedp.ID("new-conv")), chromedp.WaitVisible(chromedp.ID("conv-body")))
	id := strings.TrimPrefix(eval[string](a, "location.hash"), "#")
	if !strings.HasPrefix(id, "ses_") {
		t.Fatalf("the address names no conversation: %q", id)
	}
	a.do("send code", chromedp.SendKeys(chromedp.ID("message"), "print(6*7)"), chromedp.Click(chromedp.ID("send")))
	a.until("the check-in", `!document.getElementById("approval").hidden && !document.getElementById("approve").disabled`)
	if q := a.text("#approval-q"); !strings.Contains(q, "run_code") {
		t.Fatalf("the question: %q", q)
	}
	if ev := a.text("#live-events"); !strings.Contains(ev, "waiting for a person's decision on run_code") {
		t.Fatalf("the streamed events of the paused turn: %q", ev)
	}
	if st := a.text("#conv-state"); st != "paused" {
		t.Fatalf("state %q while it waits", st)
	}
	a.shot("2-check-in")

	// Approve: the code runs, the answer streams in.
	a.do("approve", chromedp.Click(chromedp.ID("approve")))
	a.until("the answer", `document.getElementById("live-text").textContent === "42" && document.getElementById("approval").hidden`)
	for _, want := range []string{"a person approved run_code", "tool run_code done", "code ran on"} {
		if ev := a.text("#live-events"); !strings.Contains(ev, want) {
			t.Fatalf("the streamed events lack %q: %q", want, ev)
		}
	}
	a.until("the transcript", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent === "42")`)
	// What the agent did is folded under the answer: one call, its input
	// (the code, as numbered lines) and its output, in words a person reads.
	if n := eval[int](a, `document.querySelectorAll("#transcript details.calls .call").length`); n != 1 {
		t.Fatalf("%d calls folded under the answer, want the one run_code call", n)
	}
	if open := eval[bool](a, `document.querySelector("#transcript details.calls").open`); open {
		t.Fatal("the tool calls are not folded")
	}
	a.do("unfold the call", chromedp.Click(chromedp.CSS("#transcript details.calls summary")))
	if h := a.text("#transcript details.calls .call-head"); h != "the agent ran code with run_code: done" {
		t.Fatalf("the call says %q", h)
	}
	if in := eval[[]string](a, `[...document.querySelectorAll("#transcript details.calls .code-lines li")].map((li) => li.textContent)`); len(in) != 1 || in[0] != "print(6*7)" {
		t.Fatalf("the call's input: %q", in)
	}
	if out := a.text("#transcript details.calls pre.result"); strings.TrimSpace(out) != "42" {
		t.Fatalf("the call's output: %q", out)
	}

	// The live tool session: its runner, key hash, held for, calls.
	a.until("the tool session", `document.querySelector("#tool-sessions tbody tr.live")`)
	cells := eval[[]string](a, `[...document.querySelectorAll("#tool-sessions tbody tr.live td")].map((td) => td.textContent)`)
	runner := eval[string](a, `document.querySelector("#tool-sessions tbody tr.live td .sub").textContent`)
	if len(cells) != 5 || !strings.HasPrefix(cells[0], "run_code") || !strings.Contains(runner, "interpreter") || !keyHash.MatchString(cells[1]) || !heldFor.MatchString(cells[2]) || cells[3] != "1" || cells[4] != "live" {
		t.Fatalf("the tool session row: %q", cells)
	}
	a.shot("3-answered")
	// What it used: each turn's, the conversation's, the person's month.
	a.until("each turn's usage", `[...document.querySelectorAll("#turns tbody td.used")].some((td) => td.textContent.includes("model call") && td.textContent.includes("tokens"))`)
	a.until("the conversation's usage", `document.getElementById("conv-usage").textContent.startsWith("This conversation: 1 turn · ")`)
	a.until("the month's usage", `/^You this month: [1-9][0-9]* turns? · [0-9,]+ tokens/.test(document.getElementById("usage-total").textContent)`)

	// Decline the next one, by keyboard only: Ctrl+Enter sends; Tab from
	// the note passes Approve to Decline; Enter presses it.
	a.do("send by keyboard",
		chromedp.Focus(chromedp.ID("message")),
		chromedp.SendKeys(chromedp.ID("message"), "print('should not run')"),
		chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(kb.ModifierCtrl)))
	a.until("the second check-in", `document.activeElement && document.activeElement.id === "approval-h" && !document.getElementById("decline").disabled`)
	a.do("decline with a note by keyboard",
		chromedp.Focus(chromedp.ID("approval-note")),
		chromedp.SendKeys(chromedp.ID("approval-note"), "not on a Friday"),
		chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab))
	if f := eval[string](a, "document.activeElement.id"); f != "decline" {
		t.Fatalf("two tabs from the note reach %q, not Decline", f)
	}
	a.do("press Decline", chromedp.KeyEvent(kb.Enter))
	a.until("the declined answer", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent.includes("not on a Friday"))`)
	if strings.Contains(a.text("#transcript .msg.assistant:last-child .answer"), "should not run") {
		t.Fatal("the declined code ran")
	}

	// The turn log and a run's waterfall.
	a.until("the turn log", `document.querySelectorAll("#turns tbody tr").length >= 4`)
	a.do("open a run's timeline", chromedp.Click(chromedp.CSS("#turns tbody tr:last-child button")))
	a.until("the waterfall", `document.querySelector("#waterfall li.span .bar.tool")`)
	spans := eval[[]string](a, `[...document.querySelectorAll("#waterfall li.span")].map((li) => li.getAttribute("aria-label"))`)
	joined := strings.Join(spans, "\n")
	for _, want := range []string{"turn turn:", "resumed turn:", "model ", "tool run_code:", "code "} {
		if !strings.Contains(joined, want) {
			t.Fatalf("the waterfall lacks %q:\n%s", want, joined)
		}
	}
	a.shot("4-timeline")
	axe := axeScript(t)
	a.accessible(axe, "a run's timeline")
	a.do("scroll to the top", chromedp.Evaluate[chromedp.Void]("window.scrollTo(0, 0)"))
	a.shot("console") // the README's picture
	a.noOverflow(1280)

	// Phone width.
	a.do("phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	a.noOverflow(390)
	a.shot("5-phone")
	a.do("desktop width", chromedp.EmulateViewport(1280, 800))

	// Close the conversation: it stays listed, closed, its session closed.
	// Closing asks first.
	a.do("ask to close", chromedp.Click(chromedp.ID("close-conv")), chromedp.WaitVisible(chromedp.ID("close-yes")))
	if st := a.text("#conv-state"); st == "closed" {
		t.Fatal("closed before the person confirmed")
	}
	a.accessible(axe, "the close confirmation")
	a.do("close", chromedp.Click(chromedp.ID("close-yes")))
	a.until("closed", `document.getElementById("conv-state").textContent === "closed"`)
	a.until("the session closed", `document.querySelector("#tool-sessions tbody tr.closed") && !document.querySelector("#tool-sessions tbody tr.live")`)
	if st := a.text("#tool-sessions tbody tr.closed td:last-child"); !strings.Contains(st, "session-end") {
		t.Fatalf("the closed session says %q", st)
	}
	if !eval[bool](a, `document.getElementById("composer").hidden`) {
		t.Fatal("a closed conversation still offers a message box")
	}
	a.until("listed as closed", `document.querySelector("#conv-list .badge.closed")`)
	a.shot("6-closed")
	a.accessible(axe, "a closed conversation")
	a.tokenStaysHidden(toks["alice"])
	a.clean()

	// Bob, in a browser context of his own, sees nothing of alice's.
	b := openTab(t, actx, dir)
	b.signIn(s.url, toks["bob"])
	b.until("bob's empty list", `!document.getElementById("convs-empty").hidden`)
	if n := eval[int](b, `document.querySelectorAll("#conv-list li").length`); n != 0 {
		t.Fatalf("bob sees %d conversations", n)
	}
	b.do("open alice's conversation by its id", chromedp.Navigate(s.url+"/#"+id), chromedp.WaitVisible(chromedp.ID("app")))
	b.until("not found", `document.getElementById("conv-none").textContent === "No such conversation."`)
	for _, path := range []string{"", "/messages", "/turns", "/tool-sessions", "/timeline"} {
		status := eval[int](b, fmt.Sprintf(`fetch("/v1/sessions/%s%s", {headers: {Authorization: "Bearer " + sessionStorage.getItem("agentry.token")}}).then((r) => r.status)`, id, path))
		if status != 404 {
			t.Fatalf("bob reading alice's %q: %d, want 404", path, status)
		}
	}
	b.shot("7-another-principal")
	b.tokenStaysHidden(toks["bob"])
	b.clean()

	// Sign out: the token leaves the tab.
	b.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin")))
	if v := eval[*string](b, `sessionStorage.getItem("agentry.token")`); v != nil {
		t.Fatal("the token outlived signing out")
	}
}

// A token the host does not know is refused at sign-in, and not kept.
func TestBrowserConsoleRefusesABadToken(t *testing.T) {
	actx := browser(t)
	tokens, _ := writeTokens(t, "alice")
	o := serveDefaults(t)
	o.tokens = tokens
	o.runner = "process"
	s := startServe(t, o)
	defer s.stop(t)
	b := openTab(t, actx, artifactDir(t))
	b.signIn2(s.url, "agt_not-a-token")
	b.until("the refusal", `document.getElementById("signin-error").textContent.includes("did not accept")`)
	if v := eval[*string](b, `sessionStorage.getItem("agentry.token")`); v != nil {
		t.Fatal("a refused token was kept")
	}
	b.shot("refused")
	b.accessible(axeScript(t), "a refused sign-in")
	b.clean()
}

// signIn2 signs in without waiting for the console to open.
func (b *tab) signIn2(url, token string) {
	b.t.Helper()
	b.do("open the console", chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("signin-button")))
}

// A session interaction the agent raises outside a turn is shown with its
// options, and the person's choice reaches the agent through the decision
// endpoint. The host here drives the conformance kit's fake provider (the
// native agent asks nothing outside a turn), over a real listener.
func TestBrowserConsoleSessionInteraction(t *testing.T) {
	actx := browser(t)
	ctx := context.Background()
	d := conformance.NewFakeDriver()
	reg, err := provider.OpenRegistry(ctx, []provider.Driver{d}, []provider.Definition{{ID: "fake", Provider: d.ProviderKey()}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Dispose(ctx)
	inst, _ := reg.Instance("fake")
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agentry.db"))
	if err != nil {
		t.Fatal(err)
	}
	tok, line, _ := host.GenerateToken(tool.Identity{Tenant: "acme", Principal: "alice"})
	auth, _ := host.ParseTokens(strings.NewReader(line))
	h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, EvictEvery: -1, RetentionEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer func() { _ = h.Shutdown(ctx); srv.Close() }()

	b := openTab(t, actx, artifactDir(t))
	b.signIn(srv.URL, tok)
	b.do("start", chromedp.Click(chromedp.ID("new-conv")), chromedp.WaitVisible(chromedp.ID("conv-body")))
	b.do("send", chromedp.SendKeys(chromedp.ID("message"), "hello"), chromedp.Click(chromedp.ID("send")))
	b.until("the answer", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent === "echo: hello")`)
	id := eval[string](b, `location.hash.replace(/^#/, "")`)
	if !strings.HasPrefix(id, "ses_") {
		t.Fatalf("the console's address names no conversation: %q", id)
	}
	got := make(chan provider.InteractionReply, 1)
	go func() {
		r, err := d.Interact(ctx, id, provider.Interaction{ID: "int-1", Kind: provider.InteractionQuestion,
			Message: "Which database should the migration use?", Options: []string{"staging", "prod"}})
		if err != nil {
			r.Answer = "error: " + err.Error()
		}
		got <- r
	}()
	// The host holds the question once the API shows it (bounded); then
	// the person refreshes.
	for deadline := time.Now().Add(10 * time.Second); ; {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/sessions/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(body), `"interaction":{`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host never showed the interaction: %s", body)
		}
	}
	b.do("refresh", chromedp.Click(chromedp.ID("refresh")))
	b.until("the interaction", `!document.getElementById("approval").hidden && document.querySelectorAll("#interaction-detail button.option").length === 2`)
	if h, q := b.text("#approval-h"), b.text("#approval-q"); h != "The agent asks" || q != "Which database should the migration use?" {
		t.Fatalf("the interaction reads %q / %q", h, q)
	}
	b.shot("interaction")
	b.accessible(axeScript(t), "a question from the agent")
	b.do("choose staging", chromedp.Click(chromedp.CSS(`#interaction-detail button.option`)))
	if r := <-got; r.Answer != "staging" || r.Declined {
		t.Fatalf("the agent heard %+v", r)
	}
	b.until("the box closes", `document.getElementById("approval").hidden`)
	b.clean()
}
