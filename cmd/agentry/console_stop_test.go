package main

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// The console's Stop button, in a real headless Chromium against a real
// agentry serve (--check-in run_code, a live interpreter): it shows beside
// the message box only while a turn runs or waits. Clicked while
// model-written code runs (a sleep of ten minutes), the turn ends at once,
// cancelled — the stream says so, the turn log shows it, and the next
// message is answered. Clicked while a turn waits for a decision, the
// question goes away and the conversation is open again.
func TestConsoleStopButton(t *testing.T) {
	actx, s, toks := consoleServe(t, "alice")

	b := openTab(t, actx, artifactDir(t))
	b.signIn(s.url, toks["alice"])
	b.do("start a conversation", chromedp.Click(chromedp.ID("new-conv")), chromedp.WaitVisible(chromedp.ID("conv-body")))
	if !eval[bool](b, `document.getElementById("stop").hidden`) {
		t.Fatal("Stop shows with no turn")
	}

	// A turn that runs for ten minutes once approved.
	b.do("send code that sleeps", chromedp.SendKeys(chromedp.ID("message"), "import time\ntime.sleep(600)\nprint('woke')"), chromedp.Click(chromedp.ID("send")))
	b.until("the check-in", `!document.getElementById("approval").hidden && !document.getElementById("approve").disabled`)
	b.do("approve", chromedp.Click(chromedp.ID("approve")))
	b.until("the code running", `document.getElementById("live-events").textContent.includes("tool run_code runs")`)
	if !eval[bool](b, `!document.getElementById("stop").hidden && !document.getElementById("stop").disabled`) {
		t.Fatal("no Stop button while the turn runs")
	}
	if same := eval[bool](b, `document.getElementById("stop").parentElement === document.getElementById("send").parentElement`); !same {
		t.Fatal("Stop is not beside Send")
	}
	b.do("show the button", chromedp.ScrollIntoView(chromedp.ID("stop")))
	b.shot("1-running")
	b.do("stop", chromedp.Click(chromedp.ID("stop")))
	b.until("the stopped turn", `document.getElementById("live-text").textContent.startsWith("Stopped")`)
	b.until("cancelled in the turn log", `document.querySelector("#turns tbody tr:first-child .badge.cancelled")`)
	if eval[string](b, `document.getElementById("conv-error").textContent`) != "" {
		t.Fatalf("a cancel shown as an error: %q", b.text("#conv-error"))
	}
	if !eval[bool](b, `document.getElementById("stop").hidden`) {
		t.Fatal("Stop still shows after the turn ended")
	}
	if st := b.text("#conv-state"); st != "open" {
		t.Fatalf("state %q after the stop", st)
	}
	b.until("the transcript", `document.getElementById("transcript").textContent.includes("cancelled: the turn was stopped")`)
	b.shot("2-stopped")

	// A turn waiting for a decision is given up.
	b.do("send code again", chromedp.SendKeys(chromedp.ID("message"), "print(6*7)"), chromedp.Click(chromedp.ID("send")))
	b.until("the second check-in", `!document.getElementById("approval").hidden && !document.getElementById("stop").hidden && !document.getElementById("stop").disabled`)
	b.do("stop the paused turn", chromedp.Click(chromedp.ID("stop")))
	b.until("the question gone", `document.getElementById("approval").hidden && document.getElementById("conv-state").textContent === "open"`)
	b.until("cancel in the turn log", `[...document.querySelectorAll("#turns tbody tr:first-child td")].map((td) => td.textContent).join(" ").includes("cancel cancelled")`)
	if !eval[bool](b, `document.getElementById("stop").hidden`) {
		t.Fatal("Stop still shows after the paused turn was given up")
	}

	// The conversation goes on.
	b.do("send code a third time", chromedp.SendKeys(chromedp.ID("message"), "print(6*7)"), chromedp.Click(chromedp.ID("send")))
	b.until("the third check-in", `!document.getElementById("approval").hidden && !document.getElementById("approve").disabled`)
	b.do("approve it", chromedp.Click(chromedp.ID("approve")))
	// (The interpreter the stop killed mid-sleep is replaced, and the
	// answer may say so first.)
	b.until("the answer", `document.getElementById("live-text").textContent.endsWith("42")`)
	if eval[bool](b, `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent.includes("woke"))`) {
		t.Fatal("the stopped code ran on")
	}
	b.shot("3-next")
	b.clean()
}
