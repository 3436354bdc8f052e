//go:build linux

package jail_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/jail"
)

// A terminal command is confined like the agent: same user, same mounts,
// same network rules, cwd inside the workspace.
func TestCommandConfinedLikeTheAgent(t *testing.T) {
	needJail(t)
	_, allowed := server(t, "model server")
	_, denied := server(t, "host's own port")
	pr := launchProbe(t, newAgent(t, jail.AgentOptions{}), jail.Spec{AllowHosts: []string{allowed}, Env: []string{"A=1"}})
	ws := pr.must(t, `os.mkdir("sub"); result = os.getcwd()`).(string)

	script := `import os, socket, json
r = {"uid": os.getuid(), "cwd": os.getcwd(), "a": os.environ.get("A"), "b": os.environ.get("B"), "home": os.environ["HOME"]}
try:
    open("/usr/evil", "w"); r["usr"] = "written"
except OSError as e:
    r["usr"] = "refused"
socket.create_connection(("127.0.0.1", ` + port(allowed) + `), timeout=5).close()
try:
    socket.create_connection(("127.0.0.1", ` + port(denied) + `), timeout=5); r["denied"] = "reached"
except OSError:
    r["denied"] = "refused"
open("made-by-command", "w").write("x")
print(json.dumps(r))`
	cmd, err := pr.p.Command(context.Background(), []string{python, "-c", script}, "sub", []string{"B=2"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the command failed: %v: %s", err, out)
	}
	got := string(out)
	for _, want := range []string{`"uid": 1000`, `"cwd": "` + filepath.Join(ws, "sub") + `"`, `"a": "1"`, `"b": "2"`, `"home": "/home/agent"`, `"usr": "refused"`, `"denied": "refused"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the command said %s; want %s", got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "sub", "made-by-command")); err != nil {
		t.Errorf("the command's file is not in the workspace: %v", err)
	}
	pr.ev.waitFor(t, "direct refusal from the command", refused("127.0.0.1:"+port(denied), "direct"))

	for _, bad := range []string{"..", "../x", "/etc", "sub/../../x"} {
		if _, err := pr.p.Command(context.Background(), []string{"true"}, bad, nil); err == nil {
			t.Errorf("cwd %q was accepted", bad)
		}
	}
	if _, err := pr.p.Command(context.Background(), []string{"true"}, "", []string{"HOME=/root"}); err == nil {
		t.Errorf("a command could set HOME")
	}
}

func port(hostport string) string {
	_, p, _ := strings.Cut(hostport, ":")
	return p
}

func TestWithoutBubblewrapRefuses(t *testing.T) {
	j := newAgent(t, jail.AgentOptions{Bwrap: "/nonexistent/bwrap"})
	_, err := j.Launch(context.Background(), jail.Spec{Argv: []string{"/bin/true"}, Workspace: reachableDir(t)})
	if !errors.Is(err, jail.ErrNoJail) || !strings.Contains(err.Error(), "bubblewrap") || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Fatalf("Launch without bwrap = %v; want ErrNoJail naming the Debian package bubblewrap", err)
	}
}

func TestSpecRefused(t *testing.T) {
	ws := reachableDir(t)
	j := newAgent(t, jail.AgentOptions{})
	ok := jail.Spec{Argv: []string{"/bin/true"}, Workspace: ws}
	other := reachableDir(t)
	file, link := filepath.Join(other, "file"), filepath.Join(other, "link")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(reachableDir(t), link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(s *jail.Spec){
		"no argv":                  func(s *jail.Spec) { s.Argv = nil },
		"relative argv":            func(s *jail.Spec) { s.Argv = []string{"bin/true"} },
		"missing argv":             func(s *jail.Spec) { s.Argv = []string{"no-such-agent-here"} },
		"relative ws":              func(s *jail.Spec) { s.Workspace = "ws" },
		"root ws":                  func(s *jail.Spec) { s.Workspace = "/" },
		"etc ws":                   func(s *jail.Spec) { s.Workspace = "/etc" },
		"tmp ws":                   func(s *jail.Spec) { s.Workspace = os.TempDir() },
		"missing ws":               func(s *jail.Spec) { s.Workspace = filepath.Join(ws, "nope") },
		"bad host":                 func(s *jail.Spec) { s.AllowHosts = []string{"example.com"} },
		"bad port":                 func(s *jail.Spec) { s.AllowHosts = []string{"example.com:0"} },
		"global v6":                func(s *jail.Spec) { s.AllowHosts = []string{"[2001:db8::1]:443"} },
		"HOME":                     func(s *jail.Spec) { s.Env = []string{"HOME=/root"} },
		"proxy":                    func(s *jail.Spec) { s.Env = []string{"HTTPS_PROXY=http://evil"} },
		"not NAME=VALUE":           func(s *jail.Spec) { s.Env = []string{"JUSTANAME"} },
		"twice":                    func(s *jail.Spec) { s.Env = []string{"A=1", "A=2"} },
		"label":                    func(s *jail.Spec) { s.Label = "../../etc" },
		"expose no name":           func(s *jail.Spec) { s.Expose = []jail.Exposed{{}} },
		"home not a dir":           func(s *jail.Spec) { s.Home = "/etc/hostname" },
		"relative kept HOME":       func(s *jail.Spec) { s.HomeDir = "home" },
		"kept HOME in ws":          func(s *jail.Spec) { s.HomeDir = filepath.Join(ws, "home") },
		"ws in kept HOME":          func(s *jail.Spec) { s.HomeDir = filepath.Dir(ws) },
		"kept HOME a file":         func(s *jail.Spec) { s.HomeDir = file },
		"kept HOME a link":         func(s *jail.Spec) { s.HomeDir = link },
		"kept HOME no parent":      func(s *jail.Spec) { s.HomeDir = filepath.Join(other, "a", "b") },
		"kept HOME /etc":           func(s *jail.Spec) { s.HomeDir = "/etc" },
		"kept HOME in /home/agent": func(s *jail.Spec) { s.HomeDir = "/home/agent/x" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			s := ok
			mutate(&s)
			p, err := j.Launch(context.Background(), s)
			if err == nil {
				p.Stop(context.Background())
				t.Fatalf("Launch accepted %+v", s)
			}
			if !strings.HasPrefix(err.Error(), "jail: ") {
				t.Errorf("error %q does not say where it came from", err)
			}
		})
	}
}

// A command that runs a script by its path (node /opt/agent/dist/index.js,
// here python3 /…/agent.py) finds the script inside the jail, read-only.
func TestScriptArgumentVisibleReadOnly(t *testing.T) {
	needJail(t)
	// Not under /tmp: the jail has a private one.
	dir, err := os.MkdirTemp("/var/tmp", "agentry-script-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "agent.py")
	body := "import sys\ntry:\n    open(sys.argv[0], 'a').write('x')\n    print('writable')\nexcept OSError:\n    print('read-only')\n"
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := newAgent(t, jail.AgentOptions{}).Launch(context.Background(), jail.Spec{
		Argv: []string{python, script}, Workspace: reachableDir(t)})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	defer p.Stop(context.Background())
	out, _ := io.ReadAll(p.Stdout())
	<-p.Done()
	if got := strings.TrimSpace(string(out)); got != "read-only" {
		t.Fatalf("the script said %q; stderr: %s", got, p.StderrTail())
	}
}
