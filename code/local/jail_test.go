package local_test

// The escape suite: model-written code tries to get out of the jail. Every
// test here also runs the same attempt where it should work (unjailed, or
// on the host), so a passing test cannot be an accident of the machine.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/jail"
)

func TestJailRefusesWithoutBubblewrap(t *testing.T) {
	t.Parallel()
	opt := options(t)
	opt.Jail = &local.Jail{Bwrap: "/nonexistent/bwrap"}
	for _, r := range []code.Runner{local.New(opt), local.NewInterpreter(opt)} {
		_, err := r.Start(context.Background(), code.StartRequest{Key: "k", Language: "python"})
		if !errors.Is(err, local.ErrNoJail) || !strings.Contains(err.Error(), "apt-get install bubblewrap") ||
			!strings.Contains(err.Error(), "never runs code unjailed") {
			t.Fatalf("%s without bwrap: %v", r.ID(), err)
		}
	}
	if err := local.CheckJail(context.Background(), local.Jail{Bwrap: "/nonexistent/bwrap"}); !errors.Is(err, local.ErrNoJail) {
		t.Fatalf("CheckJail: %v", err)
	}
}

func TestJailIdentity(t *testing.T) {
	t.Parallel()
	opt := jailed(t, options(t))
	r := local.NewInterpreter(opt)
	if r.ID() != "local-interpreter+bwrap" || local.New(opt).ID() != "local-process+bwrap" {
		t.Fatalf("ids: %s, %s", r.ID(), local.New(opt).ID())
	}
	s := start(t, r, "python")
	out := mustOK(t, s, `import os, socket
print(os.getuid(), os.getgid(), os.getpid() < 10, os.getcwd(), socket.gethostname())`)
	f := strings.Fields(out)
	if len(f) != 5 || f[0] == "0" || f[2] != "True" || f[3] != "/work" || f[4] != "sandbox" {
		t.Fatalf("inside the jail: uid gid own-pid-namespace cwd hostname = %q", out)
	}
	// Seen from the host, the jail's processes belong to an unprivileged
	// user even when agentry runs as root.
	pid := s.(interface{ Pid() int }).Pid()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Uid:") && strings.Fields(line)[1] == "0" {
			t.Fatalf("the jail runs as root on the host: %s", line)
		}
	}
}

func TestJailCannotReadTheHost(t *testing.T) {
	t.Parallel()
	project, err := filepath.Abs("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(os.TempDir(), fmt.Sprintf("agentry-host-secret-%d", os.Getpid()))
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	probe := fmt.Sprintf(`import os
for p in [%q, %q, "/root", "/etc/shadow", "/etc/passwd", "/home", "/proc/1/root/etc/hostname"]:
    try:
        if os.path.isdir(p):
            print(p, "LISTED", len(os.listdir(p)))
        else:
            print(p, "READ", len(open(p).read()))
    except Exception as e:
        print(p, "DENIED", type(e).__name__)
`, project, secret)

	// On the host the same code reads what it asks for.
	plain := start(t, local.NewInterpreter(options(t)), "python")
	hostOut := mustOK(t, plain, probe)
	for _, p := range []string{project, secret} {
		if !strings.Contains(hostOut, p+" READ") {
			t.Fatalf("control: the unjailed code could not read %s:\n%s", p, hostOut)
		}
	}
	jail := start(t, local.NewInterpreter(jailed(t, options(t))), "python")
	out := mustOK(t, jail, probe)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, " DENIED ") {
			t.Errorf("the jail reached the host: %s", line)
		}
	}
}

func TestJailCannotReachAnotherSession(t *testing.T) {
	t.Parallel()
	r := local.NewInterpreter(jailed(t, options(t)))
	a := start(t, r, "python")
	b := start(t, r, "python")
	mustOK(t, a, "open('mine.txt', 'w').write('alice data')\nsecret = 'alice variable'")
	aDir := dirOf(t, a)
	out := mustOK(t, b, fmt.Sprintf(`import os
for p in [%q, %q, "/work/mine.txt"]:
    try:
        print(p, "READ", open(p).read() if not os.path.isdir(p) else os.listdir(p))
    except Exception as e:
        print(p, "DENIED", type(e).__name__)
print("pids", sorted(int(x) for x in os.listdir("/proc") if x.isdigit()))
print("secret" in globals())
`, filepath.Join(aDir, "mine.txt"), aDir))
	if strings.Contains(out, "alice") || strings.Count(out, "DENIED") != 3 || !strings.HasSuffix(out, "False\n") {
		t.Fatalf("session b reached session a:\n%s", out)
	}
	// b sees only its own processes: the namespace's init and itself.
	if !strings.Contains(out, "pids [1, 2]") {
		t.Fatalf("session b sees other processes:\n%s", out)
	}
}

func TestJailCannotWriteOutsideItsWorkDir(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(jailed(t, options(t))), "python")
	marker := fmt.Sprintf("agentry-escape-%d", os.Getpid())
	out := mustOK(t, s, fmt.Sprintf(`import os
targets = ["/%[1]s", "/usr/%[1]s", "/etc/%[1]s", "/work/../%[1]s", "/dev/%[1]s", "/proc/%[1]s", "/work/inputs/../../%[1]s"]
for p in targets:
    try:
        open(p, "w").write("x")
        print(p, "WROTE")
    except Exception as e:
        print(p, "DENIED", type(e).__name__)
open("/work/ok", "w").write("x")
open("/tmp/%[1]s", "w").write("private scratch")
print("work and tmp writable")
`, marker))
	if strings.Contains(out, "WROTE") || !strings.Contains(out, "work and tmp writable") {
		t.Fatalf("the jail wrote outside its directories:\n%s", out)
	}
	// Its /tmp is the session's own, not the host's.
	if _, err := os.Stat(filepath.Join(os.TempDir(), marker)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the jail's /tmp is the host's /tmp: %v", err)
	}
	for _, p := range []string{"/" + marker, "/etc/" + marker, "/usr/" + marker} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s exists on the host", p)
		}
	}
}

func TestJailHasNoNetwork(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the host\n"))
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	probe := fmt.Sprintf(`import socket
for host in ["127.0.0.1", "1.1.1.1", "10.0.0.1"]:
    try:
        s = socket.create_connection((host, %d), timeout=3)
        print(host, "CONNECTED", s.recv(100))
    except Exception as e:
        print(host, "DENIED", type(e).__name__)
`, port)
	// Control: unjailed, the listener is reachable.
	plain := start(t, local.New(options(t)), "python")
	if out := mustOK(t, plain, probe); !strings.Contains(out, "127.0.0.1 CONNECTED") {
		t.Fatalf("control: the unjailed code could not reach the listener:\n%s", out)
	}
	<-accepted
	s := start(t, local.New(jailed(t, options(t))), "python")
	out := mustOK(t, s, probe)
	if strings.Contains(out, "CONNECTED") || strings.Count(out, "DENIED") != 3 {
		t.Fatalf("the jail reached the network:\n%s", out)
	}
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection from the jail")
	default:
	}
}

func TestJailContainsAForkBomb(t *testing.T) {
	t.Parallel()
	opt := jailed(t, options(t))
	opt.Jail.Processes = 32
	r := local.New(opt)
	// Counting: forks stop at the process limit.
	s := start(t, r, "python")
	out := mustOK(t, s, `import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped after", n, "forks:", e.strerror)
`)
	var n int
	if _, err := fmt.Sscanf(out, "stopped after %d forks", &n); err != nil || n >= 32 {
		t.Fatalf("the fork loop was not stopped by the limit: %q", out)
	}
	// The classic bomb: it cannot take the machine, and the timeout ends
	// it with everything it spawned.
	bomb := start(t, r, "bash")
	began := time.Now()
	_, err := bomb.Execute(context.Background(), code.ExecRequest{Code: ":(){ :|:& };:", Timeout: 2 * time.Second})
	if !errors.Is(err, code.ErrTimeout) && err != nil {
		t.Fatalf("fork bomb: %v", err)
	}
	if time.Since(began) > 20*time.Second {
		t.Fatalf("the bomb held the runner for %s", time.Since(began))
	}
	// The host still forks and the runner still runs.
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Fatalf("the host cannot fork after the bomb: %v %s", err, out)
	}
	if got := mustOK(t, bomb, "echo alive"); got != "alive\n" {
		t.Fatalf("after the bomb: %q", got)
	}
}

// The process budget is each jail's own: sleepers in one jail do not use
// up another's (RLIMIT_NPROC is counted per user namespace).
func TestJailProcessBudgetIsPerJail(t *testing.T) {
	t.Parallel()
	opt := jailed(t, options(t))
	opt.Jail.Processes = 32
	r := local.NewInterpreter(opt)
	a, b := start(t, r, "python"), start(t, r, "python")
	spawn := "import subprocess\nkids = [subprocess.Popen(['sleep', '60']) for _ in range(25)]\nprint(len(kids))"
	if got := mustOK(t, a, spawn); got != "25\n" {
		t.Fatalf("jail a: %q", got)
	}
	if got := mustOK(t, b, spawn); got != "25\n" {
		t.Fatalf("jail b could not use its own budget while jail a holds 25 processes: %q", got)
	}
}

func TestJailContainsAMemoryHog(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(jailed(t, options(t))), "python")
	res := run(t, s, "x = bytearray(8 << 30)\nprint('allocated 8 GiB')")
	if res.OK || !strings.Contains(res.Stderr, "MemoryError") {
		t.Fatalf("8 GiB inside the jail: %+v", res)
	}
	// Refused, not killed: the session lives on.
	if got := mustOK(t, s, "print('still here')"); got != "still here\n" {
		t.Fatalf("%q", got)
	}
}

func TestJailCannotMakeNamespaces(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(jailed(t, options(t))), "bash")
	res := run(t, s, "unshare --user --map-root-user id -u 2>&1; echo rc=$?")
	if strings.Contains(res.Stdout, "rc=0") {
		t.Fatalf("code in the jail made a user namespace:\n%s", res.Stdout)
	}
}

func TestJailedProcessRunnerEnvironment(t *testing.T) {
	t.Setenv("AGENTRY_TEST_SECRET", "hunter2")
	s := start(t, local.New(jailed(t, options(t))), "python")
	out := mustOK(t, s, "import os; print(sorted(os.environ.items()))")
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "('PATH', '"+jail.DefaultPath+"')") {
		t.Fatalf("jail environment: %s", out)
	}
}

func TestJailStagesIntoWork(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(jailed(t, options(t))), "python")
	staged, err := s.(code.Stager).Stage(context.Background(), []code.Input{{Name: "sales.csv", Data: []byte("a,b\n1,2\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if staged[0].Path != "/work/inputs/sales.csv" {
		t.Fatalf("staged at %q, want the jail's view", staged[0].Path)
	}
	out := mustOK(t, s, "import os, json\np = json.loads(os.environ['AGENTRY_INPUTS'])['sales.csv']\nprint(open(p).read().count('\\n'))")
	if out != "2\n" {
		t.Fatalf("%q", out)
	}
}

// The jail dies with its parent: a helper process opens a jailed
// interpreter and is then killed outright; the jail must not survive it.

const helperEnv = "AGENTRY_LOCAL_TEST_HELPER"

func TestJailDiesWithItsParent(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"jail", "plain"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "jail" {
				jailed(t, options(t))
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+kind, "AGENTRY_HELPER_PYTHON="+python(t))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper: %v", err)
			}
			var pids []int
			for _, f := range strings.Fields(line) {
				n, _ := strconv.Atoi(f)
				pids = append(pids, n)
			}
			if len(pids) != 2 {
				t.Fatalf("helper said %q", line)
			}
			cmd.Process.Kill()
			cmd.Wait()
			for _, pid := range pids {
				if !waitGone(t, pid, 10*time.Second) {
					t.Fatalf("process %d outlived its parent (%s)", pid, kind)
				}
			}
		})
	}
}

// runHelper is the helper process: it opens an interpreter session,
// prints the host pids of the outermost process and of python, and waits
// to be killed.
func runHelper() int {
	opt := local.Options{Commands: map[string]string{"python": os.Getenv("AGENTRY_HELPER_PYTHON")}}
	if os.Getenv(helperEnv) == "jail" {
		opt.Jail = &local.Jail{}
	}
	opt.Dir = os.Getenv("AGENTRY_HELPER_DIR")
	s, err := local.NewInterpreter(opt).Start(context.Background(), code.StartRequest{Key: "helper"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	if _, err := s.Execute(context.Background(), code.ExecRequest{Code: "x = 1"}); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	outer := s.(interface{ Pid() int }).Pid()
	fmt.Printf("%d %d\n", outer, descendToPython(outer))
	bufio.NewReader(os.Stdin).ReadString('\n') // until killed
	return 0
}

func descendToPython(pid int) int {
	for range 8 {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.HasPrefix(string(comm), "python") {
			return pid
		}
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		f := strings.Fields(string(kids))
		if len(f) == 0 {
			return pid
		}
		pid, _ = strconv.Atoi(f[0])
	}
	return pid
}
