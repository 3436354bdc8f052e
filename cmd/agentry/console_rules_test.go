package main

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserConsoleStandingRule makes a standing rule from the approval
// card ("allow this tool in this conversation"), sees the next check-in of
// that conversation answered without a card, finds the rule in the list,
// revokes it, and is asked again.
func TestBrowserConsoleStandingRule(t *testing.T) {
	axe := axeScript(t)
	actx, s, toks := consoleServe(t, "alice")
	b := openTab(t, actx, artifactDir(t))
	b.signIn(s.url, toks["alice"])
	b.until("the rules list read", `!document.getElementById("rules-empty").hidden`)
	if !eval[bool](b, `document.getElementById("agent-choice").hidden`) {
		t.Fatal("one agent with one model shows an agent picker; there is nothing to pick")
	}
	b.do("start a conversation", chromedp.Click(chromedp.ID("new-conv")))
	b.until("the conversation open", `!document.getElementById("conv-body").hidden`)
	b.do("send code", chromedp.SendKeys(chromedp.ID("message"), "print(6*7)"), chromedp.Click(chromedp.ID("send")))
	b.until("the check-in", `!document.getElementById("approval").hidden && !document.getElementById("approve").disabled`)
	b.do("remember it for this conversation", chromedp.SetValue(chromedp.ID("approval-remember"), "conversation"))
	b.accessible(axe, "a check-in with its rule choice")
	b.do("approve", chromedp.Click(chromedp.ID("approve")))
	b.until("the answer", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].some((e) => e.textContent === "42")`)
	b.until("the rule listed", `document.querySelectorAll("#rules-list .rule").length === 1`)
	if got := b.text("#rules-list .rule .rule-what"); !strings.Contains(got, "run_code") || !strings.Contains(got, "in conversation") {
		t.Fatalf("the rule reads %q; it should name the tool and the conversation", got)
	}
	b.accessible(axe, "a standing rule")

	b.do("send more code", chromedp.SendKeys(chromedp.ID("message"), "print(7*6)"), chromedp.Click(chromedp.ID("send")))
	b.until("answered by the rule, no card", `[...document.querySelectorAll("#transcript .msg.assistant .answer")].filter((e) => e.textContent === "42").length === 2`)
	if !eval[bool](b, `document.getElementById("approval").hidden`) {
		t.Fatal("the rule's conversation still showed an approval card")
	}

	b.do("revoke it", chromedp.Click(chromedp.CSS("#rules-list .rule button")))
	b.until("the list empty", `document.querySelectorAll("#rules-list .rule").length === 0 && !document.getElementById("rules-empty").hidden`)
	b.do("send code again", chromedp.SendKeys(chromedp.ID("message"), "print(1+1)"), chromedp.Click(chromedp.ID("send")))
	b.until("asked again", `!document.getElementById("approval").hidden && !document.getElementById("approve").disabled`)
	b.shot("standing-rule")
	b.clean()
}
