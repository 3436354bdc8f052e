//go:build linux

package jail_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// A hostile agent tries to write outside its three writable places, to
// read another session's workspace and a tokens file beside its own, and
// to read the host's environment.
func TestFilesystemIsConfined(t *testing.T) {
	needJail(t)
	t.Setenv("AGENTRY_TEST_HOST_SECRET", "hunter2")
	base := reachableDir(t)
	mine := filepath.Join(base, "mine")
	theirs := filepath.Join(base, "theirs")
	for _, d := range []string{mine, theirs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(theirs, "secret.txt"), []byte("other user's data"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(base, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tok":"s3cret"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl := reachableDir(t)
	if err := os.MkdirAll(filepath.Join(tmpl, ".config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmpl, ".config", "agent.json"), []byte(`{"model":"m"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	pr := launchProbe(t, newAgent(t, jail.AgentOptions{}), jail.Spec{
		Workspace: mine, Home: tmpl, Label: "abc123abc123",
		Env: []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:1", "LANG=C.UTF-8"},
	})

	for _, p := range []string{"/usr/evil", "/etc/evil", "/evil", "/home/evil", "/var/evil", "/opt/evil", "/dev/evil", "/proc/evil", "/sys/evil",
		filepath.Join(base, "evil"), filepath.Join(theirs, "evil")} {
		_, err := pr.run(t, `open(`+pyStr(p)+`, "w").write("x")`)
		// Under /tmp a write lands in the agent's private /tmp, never
		// in the host's; anywhere else it fails.
		if err == nil && !strings.HasPrefix(p, os.TempDir()+"/") {
			t.Errorf("the agent wrote %s", p)
		}
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the agent created %s on the host", p)
		}
	}
	for _, p := range []string{filepath.Join(theirs, "secret.txt"), tokens, "/etc/shadow", "/root/.bashrc"} {
		pr.mustFail(t, `result = open(`+pyStr(p)+`).read()`)
	}
	if v, err := pr.run(t, `result = os.listdir(`+pyStr(base)+`)`); err == nil {
		for _, name := range v.([]any) {
			if name == "theirs" || name == "tokens.json" {
				t.Errorf("the agent lists %s beside its workspace", name)
			}
		}
	}

	// Its own places are writable.
	pr.must(t, `open("out.txt", "w").write("ok")`)
	pr.must(t, `open("/tmp/t", "w").write("ok"); open(os.environ["HOME"] + "/h", "w").write("ok")`)
	fi, err := os.Stat(filepath.Join(mine, "out.txt"))
	if err != nil {
		t.Fatalf("the agent's file is not in the workspace: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
		t.Errorf("the agent's file belongs to host uid %d; want the unprivileged %d", st.Uid, 65534)
	}
	if got := pr.must(t, `result = os.getuid()`); got != float64(1000) {
		t.Errorf("inside, the agent is uid %v; want 1000", got)
	}
	if got := pr.must(t, `result = os.getcwd()`); got != mine {
		t.Errorf("cwd = %v; want the workspace %s", got, mine)
	}
	// The template reached HOME, and the agent's writes did not reach the template.
	if got := pr.must(t, `result = open(os.path.expanduser("~/.config/agent.json")).read()`); got != `{"model":"m"}` {
		t.Errorf("HOME's config = %v", got)
	}
	if _, err := os.Stat(filepath.Join(tmpl, "h")); err == nil {
		t.Errorf("the agent wrote into the HOME template")
	}

	// Only Spec.Env, plus what the jail sets.
	env := pr.must(t, `result = dict(os.environ)`).(map[string]any)
	for k := range env {
		switch k {
		case "ANTHROPIC_BASE_URL", "LANG", "HOME", "PATH", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "PWD", "LC_CTYPE":
		default:
			t.Errorf("the agent sees %s=%v, which Spec.Env did not give it", k, env[k])
		}
	}
	if env["HOME"] != "/home/agent" {
		t.Errorf("HOME = %v", env["HOME"])
	}
	pr.mustFail(t, `result = open("/proc/1/environ").read().index("hunter2")`)
	// /proc is the jail's own: a handful of processes, none of the host's.
	pids := pr.must(t, `result = [p for p in os.listdir("/proc") if p.isdigit()]`).([]any)
	if len(pids) > 4 {
		t.Errorf("the agent sees %d processes in /proc; want only its jail's: %v", len(pids), pids)
	}
	if got := pr.must(t, `result = open("/proc/self/status").read()`).(string); !strings.Contains(got, "NoNewPrivs:\t1") {
		t.Errorf("no_new_privs is not set in the jail")
	}

	ev := pr.ev.waitFor(t, "jail.started", func(e event.Event) bool { return e.Type == jail.TypeStarted })
	st := ev.Payload.(*jail.Started)
	if st.Label != "abc123abc123" || st.UID != 65534 || len(st.NotApplied) == 0 {
		t.Errorf("started event = %+v; want the label, the uid and the limits not applied", st)
	}
}

func pyStr(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
