package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// consoleServe starts the browser and an agentry serve the console tests
// share: the scripted model, a live interpreter per conversation (jailed
// where this machine can jail), run_code checked in, and a token for each
// of who (tenant acme). The serve stops when the test ends, unless the
// test stopped it first.
func consoleServe(t *testing.T, who ...string) (context.Context, *consoleHost, map[string]string) {
	t.Helper()
	needPython(t)
	actx := browser(t)
	tokens, toks := writeTokens(t, who...)
	o := serveDefaults(t)
	o.tokens = tokens
	o.runner = "interpreter"
	if jailWorks() {
		o.runner = "jail"
	}
	o.checkIns = []string{"run_code"}
	h := &consoleHost{served: startServe(t, o), t: t}
	t.Cleanup(h.stop)
	return actx, h, toks
}

// consoleHost is a serve a console test runs against.
type consoleHost struct {
	*served
	t    *testing.T
	once sync.Once
}

// stop stops the serve, once.
func (h *consoleHost) stop() { h.once.Do(func() { h.served.stop(h.t) }) }

// axeScript is axe-core's script: $AGENTRY_AXE_CORE (the directory .ci/run
// installs it into) or /var/cache/agentry/axe-core. Under CI=true a
// missing one fails the test; elsewhere it skips, loudly.
func axeScript(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AGENTRY_AXE_CORE")
	if dir == "" {
		dir = "/var/cache/agentry/axe-core"
	}
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("axe-core is missing and CI=true: %v (.ci/run installs it)", err)
		}
		t.Skipf("LOUD: axe-core is missing (%v); .ci/run installs it", err)
	}
	return string(b)
}

// accessible runs axe-core on the page as it stands (injected through
// the DevTools protocol, which the page's policy does not govern) and
// fails the test on any serious or critical violation, naming each with
// the elements it found.
func (b *tab) accessible(axe, screen string) {
	b.t.Helper()
	if !eval[bool](b, "typeof axe === 'object'") {
		eval[bool](b, axe+";true")
	}
	found := eval[[]string](b, `axe.run(document, {resultTypes: ["violations"]}).then((r) => r.violations
		.filter((v) => v.impact === "serious" || v.impact === "critical")
		.map((v) => v.impact + " " + v.id + ": " + v.help + " — " + v.nodes.slice(0, 4).map((n) => n.target.join(" ") + (n.failureSummary ? " (" + n.failureSummary.replace(/\s+/g, " ") + ")" : "")).join("; ")))`)
	if len(found) > 0 {
		b.shot("axe-" + screen)
		b.t.Errorf("axe-core on %s: %d serious or critical violations:\n%s", screen, len(found), strings.Join(found, "\n"))
	}
}

// key presses one key (with modifiers) where the focus is.
func (b *tab) key(what, k string, opts ...chromedp.KeyOption) {
	b.t.Helper()
	b.do(what, chromedp.KeyEvent(k, opts...))
}

// focused waits until the element of that id has the focus: told by
// focusin (a focus change is no DOM mutation, which until watches).
func (b *tab) focused(what, id string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	expr := fmt.Sprintf(`new Promise((resolve) => {
		const ok = () => document.activeElement && document.activeElement.id === %q;
		if (ok()) return resolve(true);
		const f = () => { if (ok()) { document.removeEventListener("focusin", f); resolve(true); } };
		document.addEventListener("focusin", f);
	})`, id)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr, chromedp.EvalAwaitPromise)); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		focus, _ := chromedp.Run(context.WithoutCancel(b.ctx), chromedp.Evaluate[string]("document.activeElement ? document.activeElement.tagName + '#' + document.activeElement.id : 'none'"))
		b.t.Fatalf("%s: #%s never had the focus (it is on %s): %v", what, id, focus, err)
	}
}
