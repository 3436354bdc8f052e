package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// api calls the host as a script (or another tab) would: not through the
// console.
func apiCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// within waits at most d for expr (re-checked on every DOM change).
func (b *tab) within(what string, d time.Duration, expr string) {
	b.t.Helper()
	start := time.Now()
	b.until(what, expr)
	if took := time.Since(start); took > d {
		b.t.Fatalf("%s took %s, more than %s", what, took, d)
	}
	b.t.Logf("%s: %s", what, time.Since(start).Round(time.Millisecond))
}

// The console is live: a conversation opened and a check-in raised
// through the API (not the console) appear in the open console without a
// reload within 2 s, in the inbox and in the conversation; the approval
// card shows the code as numbered lines, a <script> in it as text; and
// when the host stops, a banner says it cannot be reached.
func TestBrowserConsoleLive(t *testing.T) {
	actx, s, toks := consoleServe(t, "alice")
	dir := artifactDir(t)

	a := openTab(t, actx, dir)
	a.signIn(s.url, toks["alice"])
	a.until("live", `document.getElementById("feed-state").textContent.startsWith("Live")`)
	a.until("an empty inbox", `!document.getElementById("inbox-empty").hidden`)

	status, body := apiCall(t, "POST", s.url+"/v1/sessions", toks["alice"], "{}")
	if status != http.StatusCreated {
		t.Fatalf("open: %d %s", status, body)
	}
	id := body[strings.Index(body, "ses_") : strings.Index(body, "ses_")+36]
	a.within("the new conversation listed", 2*time.Second, `document.querySelector('#conv-list [data-id="`+id+`"]')`)
	a.do("open it", chromedp.Click(chromedp.CSS(`#conv-list [data-id="`+id+`"]`)), chromedp.WaitVisible(chromedp.ID("conv-body")))

	code := `print("<script>alert(1)</script>")` + "\\n" + `print(6*7)`
	status, body = apiCall(t, "POST", s.url+"/v1/sessions/"+id+"/turns", toks["alice"], `{"message":"`+strings.ReplaceAll(code, `"`, `\"`)+`"}`)
	if status != http.StatusAccepted {
		t.Fatalf("the check-in: %d %s", status, body)
	}
	a.within("the check-in in the inbox", 2*time.Second, `document.querySelector('#inbox-list [data-id="`+id+`"]')`)
	a.within("the check-in in its conversation", 2*time.Second, `!document.getElementById("approval").hidden && document.querySelectorAll("#approval-args .code-lines li").length === 2`)
	lines := eval[[]string](a, `[...document.querySelectorAll("#approval-args .code-lines li")].map((li) => li.textContent)`)
	if lines[0] != `print("<script>alert(1)</script>")` || lines[1] != "print(6*7)" {
		t.Fatalf("the approval card's lines: %q", lines)
	}
	if n := eval[int](a, `document.querySelectorAll("script:not([src])").length + document.querySelectorAll("#approval-args *:not(ol):not(li):not(code):not(div)").length`); n != 0 {
		t.Fatalf("the arguments were parsed as markup: %d elements", n)
	}
	if !eval[bool](a, `document.getElementById("message").disabled && !document.getElementById("stop").hidden`) {
		t.Fatal("the message box is usable while the turn waits, or Stop is not beside it")
	}
	a.shot("live-check-in")
	a.accessible(axeScript(t), "the inbox with a check-in")

	// Approve in the console: the inbox empties, the answer is there.
	a.do("approve", chromedp.Click(chromedp.ID("approve")))
	a.until("answered", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent.includes("42"))`)
	a.until("the inbox empties", `!document.getElementById("inbox-empty").hidden`)
	a.until("the tool call's output under its answer", `[...document.querySelectorAll("#transcript details.calls pre.result")].some((e) => e.textContent.includes("42"))`)
	if out := a.text("#transcript details.calls pre.result"); !strings.Contains(out, "<script>alert(1)</script>") {
		t.Fatalf("the call's output, as text: %q", out)
	}
	if n := eval[int](a, `document.querySelectorAll("#transcript script, #transcript details.calls pre.result *").length`); n != 0 {
		t.Fatalf("the call's output was parsed as markup: %d elements", n)
	}

	// The host stops: a banner says so.
	s.stop()
	a.until("the banner", `!document.getElementById("banner").hidden && document.getElementById("banner-text").textContent.includes("cannot be reached")`)
	a.shot("host-stopped")
	a.accessible(axeScript(t), "the host-unreachable banner")
	a.clean()
}
