package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// An ACP agent's file edit, in a real headless Chromium against a real
// agentry serve driving a scripted ACP agent (testdata/acpagent, jailed):
// the approval card shows the edit as the unified diff the agent sent,
// with the markup in its lines as text; approved, the edit is made, and
// the call under the answer shows the same diff as its input, its output,
// and says what happened in words.
func TestBrowserConsoleACPEditDiff(t *testing.T) {
	agentCmd := acpAgentBinary(t)
	axe := axeScript(t)
	actx := browser(t)
	dir, _ := agentDir(t)
	tokens, toks := writeTokens(t, "alice")
	o := serveDefaults(t)
	o.tokens = tokens
	o.agent = "acp"
	o.acp.cmd = agentCmd
	o.workspaces = filepath.Join(dir, "workspaces")
	h := &consoleHost{served: startServe(t, o), t: t}
	t.Cleanup(h.stop)

	b := openTab(t, actx, artifactDir(t))
	b.signIn(h.url, toks["alice"])
	b.do("start", chromedp.Click(chromedp.ID("new-conv")), chromedp.WaitVisible(chromedp.ID("conv-body")))
	b.do("ask for the edit", chromedp.SendKeys(chromedp.ID("message"), "edit"), chromedp.Click(chromedp.ID("send")))
	b.until("the approval with its diff", `!document.getElementById("approval").hidden && document.querySelector("#approval-args pre.diff") && !document.getElementById("approve").disabled`)
	lines := eval[[]string](b, `[...document.querySelectorAll("#approval-args pre.diff span")].map((s) => s.className + " " + s.textContent.replace(/\n$/, ""))`)
	got := strings.Join(lines, "\n")
	for _, want := range []string{"ctx  hello", "del -<b>old</b>", "add +<script>alert(1)</script>", "ctx  bye"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the diff lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "--- a/") || !strings.Contains(got, "+++ b/") || !strings.Contains(got, "hello.txt") {
		t.Fatalf("the diff names no file:\n%s", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#approval-args script, #approval-args b").length`); n != 0 {
		t.Fatalf("the diff was parsed as markup: %d elements", n)
	}
	b.shot("acp-edit-diff")
	b.accessible(axe, "an ACP edit waiting for approval")

	b.do("approve", chromedp.Click(chromedp.ID("approve")))
	b.until("the answer", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent === "edited hello.txt")`)
	ws, _ := filepath.Glob(filepath.Join(o.workspaces, "*", "hello.txt"))
	if len(ws) != 1 {
		t.Fatalf("the edited file: %v", ws)
	}
	if body, _ := os.ReadFile(ws[0]); string(body) != "hello\n<script>alert(1)</script>\nbye\n" {
		t.Fatalf("hello.txt after the edit: %q", body)
	}
	b.do("unfold the calls", chromedp.Click(chromedp.CSS("#transcript details.calls summary")))
	if head := b.text("#transcript details.calls .call:not(.activity) .call-head"); !strings.HasPrefix(head, "the agent asked to edit ") || !strings.HasSuffix(head, "hello.txt: done") {
		t.Fatalf("the call says %q", head)
	}
	if in := b.text("#transcript details.calls .call:not(.activity) pre.diff"); !strings.Contains(in, "+<script>alert(1)</script>") {
		t.Fatalf("the call's input: %q", in)
	}
	if out := b.text("#transcript details.calls .call:not(.activity) pre.result"); out != "edited hello.txt" {
		t.Fatalf("the call's output: %q", out)
	}
	if n := eval[int](b, `document.querySelectorAll("#transcript script, #transcript b").length`); n != 0 {
		t.Fatalf("the transcript parsed markup: %d elements", n)
	}
	b.shot("acp-edit-done")
	b.accessible(axe, "an ACP edit's answer")
	b.clean()
}

// The keyboard-only path through a turn with an approval, with axe-core
// on every screen: sign in, start a conversation, send code, approve,
// read the answer, switch conversations, and decline, with no pointer at
// all; every control on the way has a name.
func TestBrowserConsoleKeyboardOnly(t *testing.T) {
	axe := axeScript(t)
	actx, s, toks := consoleServe(t, "alice")
	b := openTab(t, actx, artifactDir(t))
	b.do("open the console", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.accessible(axe, "sign-in")
	if f := eval[string](b, "document.activeElement.id"); f != "token" {
		t.Fatalf("the sign-in page starts with focus on %q, not the token field", f)
	}
	b.do("type the token and press Enter", chromedp.KeyEvent(toks["alice"]), chromedp.KeyEvent(kb.Enter))
	b.until("signed in", `!document.getElementById("app").hidden && document.getElementById("feed-state").textContent.startsWith("Live")`)
	b.accessible(axe, "an empty console")

	// Tab to "New conversation" and press it.
	b.tabTo("new-conv", 12)
	b.key("start a conversation", kb.Enter)
	b.focused("the message box focused", "message")
	first := strings.TrimPrefix(eval[string](b, "location.hash"), "#")
	b.do("send code by keyboard", chromedp.KeyEvent("print(6*7)"), chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(kb.ModifierCtrl)))
	b.until("the check-in", `!document.getElementById("approval").hidden && !document.getElementById("approve").disabled`)
	b.focused("the check-in focused", "approval-h")
	b.accessible(axe, "a check-in")
	b.tabTo("approve", 6)
	b.key("approve", kb.Enter)
	b.until("the answer", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent === "42")`)
	b.focused("focus back in the message box", "message")
	b.accessible(axe, "an answered turn")

	// A second conversation, then back to the first through the list.
	b.tabTo("new-conv", 40, kb.ModifierShift)
	b.key("start another", kb.Enter)
	b.until("the second conversation", `location.hash !== "#`+first+`"`)
	b.focused("the second conversation's message box", "message")
	b.tabTo("conv-"+first, 40, kb.ModifierShift)
	b.key("switch back", kb.Enter)
	b.until("the first conversation shown", `location.hash === "#`+first+`"`)
	b.focused("its heading focused", "conv-h")

	// Decline the next check-in by keyboard.
	b.tabTo("message", 40)
	b.do("send more code", chromedp.KeyEvent("print('no')"), chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(kb.ModifierCtrl)))
	b.until("the second check-in", `!document.getElementById("approval").hidden && !document.getElementById("decline").disabled`)
	b.focused("the second check-in focused", "approval-h")
	b.tabTo("decline", 8)
	b.key("decline", kb.Enter)
	b.until("the declined answer", `document.querySelectorAll("#turns tbody tr").length >= 4 && document.getElementById("approval").hidden`)
	b.accessible(axe, "a declined turn")

	// Every control has a name.
	if unnamed := eval[[]string](b, `[...document.querySelectorAll("button, input, textarea, select, summary, [tabindex]")]
		.filter((e) => !e.closest("[hidden]") && !(e.getAttribute("aria-label") || e.labels?.length || e.textContent.trim() || e.getAttribute("aria-labelledby")))
		.map((e) => e.tagName + "#" + e.id)`); len(unnamed) > 0 {
		t.Fatalf("controls without a name: %q", unnamed)
	}
	b.shot("keyboard-only")
	b.clean()
}

// tabTo presses Tab (Shift+Tab with kb.ModifierShift) until the element
// of that id has the focus, at most n times, as a keyboard user would.
func (b *tab) tabTo(id string, n int, mods ...kb.Modifier) {
	b.t.Helper()
	var opts []chromedp.KeyOption
	if len(mods) > 0 {
		opts = append(opts, chromedp.KeyModifiers(mods...))
	}
	for range n {
		if eval[string](b, "document.activeElement ? document.activeElement.id : ''") == id {
			return
		}
		b.key("Tab towards "+id, kb.Tab, opts...)
	}
	if got := eval[string](b, "document.activeElement ? document.activeElement.id : ''"); got != id {
		b.shot("tab-to-" + id)
		b.t.Fatalf("%d Tabs did not reach #%s (the focus is on #%s)", n, id, got)
	}
}
