package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	goleak.VerifyTestMain(m)
}

// python is a real interpreter binary (not a version manager's shim,
// which runs a shell script first and sets variables of its own).
func python(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("these tests need python3 (Debian: apt-get install python3)")
	}
	return p
}

func options(t testing.TB) local.Options {
	return local.Options{Commands: map[string]string{"python": python(t)}}
}

// dirOf is the host directory of a session from this package.
func dirOf(t testing.TB, s code.Session) string {
	t.Helper()
	d, ok := s.(interface{ Dir() string })
	if !ok {
		t.Fatalf("session %T has no Dir", s)
	}
	return d.Dir()
}

func start(t testing.TB, r code.Runner, lang string) code.Session {
	t.Helper()
	s, err := r.Start(context.Background(), code.StartRequest{Key: "t=acme/p=bob/r=" + t.Name(), Language: lang})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func run(t testing.TB, s code.Session, src string) code.Result {
	t.Helper()
	res, err := s.Execute(context.Background(), code.ExecRequest{Code: src})
	if err != nil {
		t.Fatalf("Execute(%q): %v", src, err)
	}
	return res
}

func mustOK(t testing.TB, s code.Session, src string) string {
	t.Helper()
	res := run(t, s, src)
	if !res.OK {
		t.Fatalf("Execute(%q) failed: exit %v\nstdout: %s\nstderr: %s", src, exitOf(res), res.Stdout, res.Stderr)
	}
	return res.Stdout
}

func exitOf(r code.Result) string {
	if r.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*r.ExitCode)
}

// waitGone waits, without polling, until process pid has exited: the
// kernel tells us through a pidfd. It reports false after d.
func waitGone(t testing.TB, pid int, d time.Duration) bool {
	t.Helper()
	fd, _, errno := syscall.Syscall(434 /* pidfd_open */, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		return true
	}
	if errno != 0 {
		t.Fatalf("pidfd_open(%d): %v", pid, errno)
	}
	defer syscall.Close(int(fd))
	fds := []pollFd{{fd: int32(fd), events: 1 /* POLLIN */}}
	for {
		_, _, errno = syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(d.Milliseconds()))
		if errno == syscall.EINTR {
			continue
		}
		break
	}
	if fds[0].revents != 0 {
		return true
	}
	// A zombie waiting for its reaper counts as gone.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(stat), ") Z ")
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// jailed returns a jailed copy of opt, or skips the test — loudly — where
// bubblewrap cannot run at all; under CI=true it fails instead, so a CI
// machine without a working jail cannot pass the escape suite by skipping
// it. Anywhere bubblewrap can run, the jail tests run.
func jailed(t testing.TB, opt local.Options) local.Options {
	t.Helper()
	opt.Jail = &local.Jail{}
	if err := jailAvailable(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the jail cannot run here: %v", err)
		}
		msg := fmt.Sprintf("\n%s\nSKIPPING A JAIL TEST: bubblewrap cannot run here: %v\n%s", strings.Repeat("!", 72), err, strings.Repeat("!", 72))
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	return opt
}

// sessionBase is a directory for a test's sessions that a jail's
// unprivileged user can traverse (t.TempDir's are private to root).
func sessionBase(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "agentry-test-base-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var jailAvailable = sync.OnceValue(func() error {
	err := local.CheckJail(context.Background(), local.Jail{})
	if err != nil && !errors.Is(err, local.ErrNoJail) {
		err = fmt.Errorf("unexpected probe error: %w", err)
	}
	return err
})
