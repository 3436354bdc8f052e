package host_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// jailedRunCode is run_code on the persistent interpreter inside
// bubblewrap, one session per conversation. Without bubblewrap the test
// is skipped, loudly — and under CI=true it fails instead.
func jailedRunCode(t *testing.T) tool.Tool {
	t.Helper()
	if err := local.CheckJail(context.Background(), local.Jail{}); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bubblewrap cannot build a jail under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: bubblewrap cannot build a jail here: %v", err)
	}
	r := local.NewInterpreter(local.Options{Jail: &local.Jail{}})
	return code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeSession})
}

func (f *fixture) runCode(who, id, src string) string {
	f.t.Helper()
	args, _ := json.Marshal(map[string]string{"code": src})
	r := f.say(who, id, "call run_code "+string(args))
	want(f.t, r, 200, "")
	out, _ := r.json(f.t)["output"].(string)
	return out
}

// A principal's code writes a file; another principal's code — told the
// exact path — cannot read it, and neither can the same principal name in
// another tenant. The writer's own next turn can.
func TestSandboxesAreIsolated(t *testing.T) {
	f := newFixture(t, config{tools: []tool.Tool{jailedRunCode(t)}})
	a := f.open("alice")
	out := f.runCode("alice", a, "import os\nopen('secret.txt', 'w').write('alice-secret')\nprint('PATH=' + os.path.abspath('secret.txt'))")
	_, path, ok := strings.Cut(out, "PATH=")
	if !ok {
		t.Fatalf("alice's code printed no path: %q", out)
	}
	path = strings.Fields(path)[0]
	probe := "import os\nfor p in [" + strconvQuote(path) + ", 'secret.txt']:\n" +
		"    try:\n        print('READ', open(p).read())\n    except Exception as e:\n        print('REFUSED', type(e).__name__)\n" +
		"print('LISTING', sorted(os.listdir(os.path.dirname(" + strconvQuote(path) + ") or '.')) if os.path.isdir(os.path.dirname(" + strconvQuote(path) + ")) else 'no dir')"
	for _, who := range []string{"bob", "carol"} {
		b := f.open(who)
		out := f.runCode(who, b, probe)
		if strings.Contains(out, "alice-secret") || strings.Count(out, "REFUSED") != 2 {
			t.Fatalf("%s's code reached alice's sandbox: %q", who, out)
		}
	}
	if out := f.runCode("alice", a, "print(open('secret.txt').read())"); !strings.Contains(out, "alice-secret") {
		t.Fatalf("alice lost her own file: %q", out)
	}
	// Closing alice's conversation closes her sandbox, and only hers.
	live := f.liveTools()
	want(t, f.do("DELETE", "/v1/sessions/"+a, "alice", nil), 204, "")
	if n := f.liveTools(); n != live-1 {
		t.Fatalf("live tool sessions %d → %d after closing alice's conversation", live, n)
	}
	b := f.open("alice")
	if out := f.runCode("alice", b, probe); strings.Contains(out, "alice-secret") {
		t.Fatalf("a new conversation of alice's reached the closed one's sandbox: %q", out)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
