//go:build linux

package jail_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	goleak.VerifyTestMain(m)
}

const python = "/usr/bin/python3"

// needJail fails under CI=true, and skips elsewhere, when this machine
// cannot jail an agent.
func needJail(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		fail(t, "these tests need the system python3 at /usr/bin/python3 (Debian: apt-get install python3)")
	}
	if err := newAgent(t, jail.AgentOptions{}).Check(context.Background()); err != nil {
		fail(t, "cannot jail here: %v", err)
	}
}

// newAgent is the agent profile with o, which must be valid.
func newAgent(t testing.TB, o jail.AgentOptions) *jail.Agent {
	t.Helper()
	a, err := jail.NewAgent(o)
	if err != nil {
		t.Fatalf("NewAgent: %v", err)
	}
	return a
}

func fail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// reachableDir is a fresh directory the jail's user can reach.
func reachableDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// events collects a jail's events and lets a test wait for one.
type events struct {
	mu   sync.Mutex
	list []event.Event
	ch   chan struct{}
}

func newEvents() *events { return &events{ch: make(chan struct{}, 1)} }

func (e *events) add(ev event.Event) {
	e.mu.Lock()
	e.list = append(e.list, ev)
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

func (e *events) all() []event.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]event.Event(nil), e.list...)
}

// waitFor waits (bounded) until an event satisfies ok.
func (e *events) waitFor(t testing.TB, what string, ok func(event.Event) bool) event.Event {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		for _, ev := range e.all() {
			if ok(ev) {
				return ev
			}
		}
		select {
		case <-e.ch:
		case <-deadline.C:
			t.Fatalf("no %s event; got %v", what, e.all())
		}
	}
}

func refused(target, via string) func(event.Event) bool {
	return func(ev event.Event) bool {
		r, ok := ev.Payload.(*jail.Refused)
		return ok && r.Target == target && r.Via == via
	}
}

// probeAgent is the agent the tests jail: it runs each line of Python it
// reads and answers with one JSON line.
const probeAgent = `import sys, json, os, socket
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    env = {"json": json, "os": os, "socket": socket}
    try:
        exec(req["code"], env)
        out = {"ok": True, "result": env.get("result")}
    except Exception as e:
        out = {"ok": False, "error": type(e).__name__ + ": " + str(e)}
    print(json.dumps(out), flush=True)
`

type probe struct {
	p   *jail.Process
	ev  *events
	out *bufio.Reader
}

// launchProbe jails the probe agent with spec (Argv is filled in).
func launchProbe(t testing.TB, j *jail.Agent, spec jail.Spec) *probe {
	t.Helper()
	ev := newEvents()
	spec.Argv = []string{python, "-u", "-c", probeAgent}
	spec.Events = ev.add
	if spec.Workspace == "" {
		spec.Workspace = reachableDir(t)
	}
	p, err := j.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		p.Stdout().Close()
	})
	pr := &probe{p: p, ev: ev, out: bufio.NewReader(p.Stdout())}
	line, err := pr.out.ReadString('\n')
	if err != nil || !strings.Contains(line, "ready") {
		t.Fatalf("the probe agent did not start: %q %v; stderr: %s", line, err, p.StderrTail())
	}
	return pr
}

// run executes code in the jailed agent; it sets result for the answer.
func (pr *probe) run(t testing.TB, code string) (any, error) {
	t.Helper()
	req, _ := json.Marshal(map[string]string{"code": code})
	if _, err := pr.p.Stdin().Write(append(req, '\n')); err != nil {
		t.Fatalf("writing to the agent: %v", err)
	}
	line, err := pr.out.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the agent: %v; stderr: %s", err, pr.p.StderrTail())
	}
	var out struct {
		OK     bool   `json:"ok"`
		Result any    `json:"result"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &out); err != nil {
		t.Fatalf("the agent said %q: %v", line, err)
	}
	if !out.OK {
		return nil, errors.New(out.Error)
	}
	return out.Result, nil
}

// must runs code that must succeed.
func (pr *probe) must(t testing.TB, code string) any {
	t.Helper()
	v, err := pr.run(t, code)
	if err != nil {
		t.Fatalf("in the jail, %s: %v", code, err)
	}
	return v
}

// mustFail runs code that must raise, and returns the error.
func (pr *probe) mustFail(t testing.TB, code string) error {
	t.Helper()
	v, err := pr.run(t, code)
	if err == nil {
		t.Fatalf("in the jail, %s succeeded (result %v); it must fail", code, v)
	}
	return err
}

// processesWith lists host pids whose environment holds marker.
func processesWith(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

const helperEnv = "AGENTRY_JAIL_TEST_HELPER"

// runHelper is a host process that launches a jailed agent which ignores
// SIGTERM and forks, prints "up", and waits to be killed.
func runHelper() int {
	ws := os.Getenv("AGENTRY_JAIL_TEST_WS")
	marker := os.Getenv(helperEnv)
	o := jail.AgentOptions{Dir: os.Getenv("AGENTRY_JAIL_TEST_DIR")}
	if os.Getenv("AGENTRY_JAIL_TEST_CAPS") != "" {
		o.Caps = &jail.Caps{}
	}
	a, err := jail.NewAgent(o)
	if err != nil {
		fmt.Println("NewAgent:", err)
		return 1
	}
	p, err := a.Launch(context.Background(), jail.Spec{
		Argv:      []string{"/bin/sh", "-c", stubborn},
		Env:       []string{"MARKER=" + marker},
		Workspace: ws,
	})
	if err != nil {
		fmt.Println("launch:", err)
		return 1
	}
	cmd, err := p.Command(context.Background(), []string{"/bin/sh", "-c", "trap '' TERM; echo on; while :; do sleep 1; done"}, "", []string{"MARKER=" + marker})
	if err != nil {
		fmt.Println("command:", err)
		return 1
	}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		fmt.Println("command:", err)
		return 1
	}
	// Both run (past bubblewrap's setup) before the helper says so.
	if on, _ := bufio.NewReader(out).ReadString('\n'); on != "on\n" {
		fmt.Println("command said:", on)
		return 1
	}
	line, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
	fmt.Print(line)
	select {}
}

// stubborn ignores SIGTERM, forks three children that do too, and says
// "up" once they run.
const stubborn = `trap '' TERM
for i in 1 2 3; do (trap '' TERM; while :; do sleep 1; done) & done
echo up
while :; do sleep 1; done`

var _ = exec.Command
