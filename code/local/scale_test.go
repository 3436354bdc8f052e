//go:build linux

package local_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

// TestManyLiveJailedSessions holds many jailed interpreter sessions at
// once and checks that they cost the machine nothing it runs out of: one
// inotify instance for the whole process (the user's limit is 128), and
// another program can still make its own. It reports the memory each
// session holds (PSS, summed over its processes). 20 sessions by default;
// AGENTRY_SESSIONS=500 for the full figure:
//
//	AGENTRY_SESSIONS=500 go test -run ManyLiveJailed -v ./code/local/
func TestManyLiveJailedSessions(t *testing.T) {
	n := 20
	if v := os.Getenv("AGENTRY_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("AGENTRY_SESSIONS=%q is not a count", v)
		}
	}
	opt := jailed(t, options(t))
	opt.Dir = sessionBase(t)
	r := local.NewInterpreter(opt)
	ctx := context.Background()
	sessions := make([]code.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{}, 4)
	for i := range n {
		wg.Go(func() {
			gate <- struct{}{}
			defer func() { <-gate }()
			s, err := r.Start(ctx, code.StartRequest{Key: "t=scale/p=" + strconv.Itoa(i)})
			if err != nil {
				errs[i] = err
				return
			}
			sessions[i] = s
			res, err := s.Execute(ctx, code.ExecRequest{Code: "x = list(range(1000))\nprint(len(x))"})
			if err == nil && res.Stdout != "1000\n" {
				err = errorString(res.Stdout + res.Stderr)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, s := range sessions {
			if s != nil {
				wg.Go(func() {
					gate <- struct{}{}
					defer func() { <-gate }()
					s.Stop(ctx)
				})
			}
		}
		wg.Wait()
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("session %d of %d: %v", i, n, err)
		}
	}
	if got := inotifyInstances(t); got > 1 {
		t.Fatalf("%d inotify instances for %d sessions; want at most one", got, n)
	}
	// Another program of the same user can still watch files.
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("with %d sessions live, a new inotify instance fails: %v", n, err)
	}
	syscall.Close(fd)
	var pss, rss int
	for _, s := range sessions {
		for _, p := range tree(s.(interface{ Pid() int }).Pid()) {
			pss += rollupKB(p, "Pss:")
			rss += statusKB(p, "VmRSS:")
		}
	}
	t.Logf("%d live jailed sessions: %.1f MiB PSS and %.1f MiB RSS per session", n, float64(pss)/1024/float64(n), float64(rss)/1024/float64(n))
	// Every one still answers.
	for i, s := range sessions {
		if got := mustOK(t, s, "print(len(x))"); got != "1000\n" {
			t.Fatalf("session %d: %q", i, got)
		}
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

func inotifyInstances(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "inotify") {
			n++
		}
	}
	return n
}
