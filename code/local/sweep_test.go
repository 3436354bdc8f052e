package local_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/toolsession"
)

// A process killed with SIGKILL cannot clean up: its session directory
// (the user's files, and in a jail the tmpfs holding them) stays. The next
// runner's first Start sweeps it, says so in an event, and leaves a live
// process's directories alone.
func TestStartSweepsWhatAKilledProcessLeft(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"jail", "plain"} {
		t.Run(kind, func(t *testing.T) {
			opt := options(t)
			if kind == "jail" {
				opt = jailed(t, opt)
			}
			base := sessionBase(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+kind, "AGENTRY_HELPER_PYTHON="+python(t), "AGENTRY_HELPER_DIR="+base)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper: %v", err)
			}
			left, _ := filepath.Glob(filepath.Join(base, "agentry-*"))
			if len(left) != 1 {
				t.Fatalf("the helper's session directory: %v", left)
			}
			// A live session of this process in the same place.
			opt.Dir = base
			var mu sync.Mutex
			var swept []*jail.RunnerSwept
			opt.Events = func(e event.Event) {
				if e.Type == jail.TypeRunnerSwept {
					mu.Lock()
					swept = append(swept, e.Payload.(*jail.RunnerSwept))
					mu.Unlock()
				}
			}
			cmd.Process.Kill()
			cmd.Wait()
			r := local.NewInterpreter(opt)
			mine := start(t, r, "python")
			if _, err := os.Stat(left[0]); !os.IsNotExist(err) {
				t.Fatalf("the dead process's directory is still there: %v", err)
			}
			if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), left[0]) {
				t.Fatalf("the dead process's tmpfs is still mounted")
			}
			var dirs *jail.RunnerSwept
			for _, s := range swept {
				if s.What == "session-dirs" {
					dirs = s
				}
			}
			if dirs == nil || dirs.Removed != 1 || len(dirs.Owners) != 1 || dirs.Owners[0] != cmd.Process.Pid {
				t.Fatalf("sweep events: %+v", swept)
			}
			// A second runner's sweep leaves the live session alone.
			other := local.NewInterpreter(opt)
			start(t, other, "python")
			if _, err := os.Stat(dirOf(t, mine)); err != nil {
				t.Fatalf("a live session's directory was swept: %v", err)
			}
			mustOK(t, mine, "print(1)")
		})
	}
}

// A pooled interpreter is bound to its session only when taken, has never
// run anyone's code, and is never handed out twice; Close stops the rest.
func TestPoolHandsOutFreshInterpreters(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"jail", "plain"} {
		t.Run(kind, func(t *testing.T) {
			opt := options(t)
			if kind == "jail" {
				opt = jailed(t, opt)
			}
			opt.Dir = sessionBase(t)
			opt.Pool = local.Pool{Size: 2, Refill: time.Millisecond}
			r := local.NewInterpreter(opt)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Warm(ctx); err != nil {
				t.Fatal(err)
			}
			if r.Pooled() != 2 {
				t.Fatalf("pooled %d after Warm", r.Pooled())
			}
			members, _ := filepath.Glob(filepath.Join(opt.Dir, "agentry-pool-*"))
			if len(members) != 2 {
				t.Fatalf("pool members' directories: %v", members)
			}
			alice, err := r.Start(ctx, code.StartRequest{Key: "t=acme/p=alice/r=1"})
			if err != nil {
				t.Fatal(err)
			}
			mustOK(t, alice, "secret = 'alice'\nopen('mine.txt', 'w').write('alice data')")
			if !strings.Contains(dirOf(t, alice), "agentry-"+hashOf("t=acme/p=alice/r=1")+"-") {
				t.Fatalf("alice's session was not bound to her key: %s", dirOf(t, alice))
			}
			if err := alice.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			// Whatever bob gets, it has never run alice's code.
			bob, err := r.Start(ctx, code.StartRequest{Key: "t=acme/p=bob/r=1"})
			if err != nil {
				t.Fatal(err)
			}
			defer bob.Stop(context.Background())
			out := mustOK(t, bob, "import os\nprint('secret' in globals(), sorted(os.listdir('.')))")
			if out != "False []\n" {
				t.Fatalf("bob's pooled interpreter: %q", out)
			}
			if err := r.Warm(ctx); err != nil { // refilled
				t.Fatal(err)
			}
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if left, _ := filepath.Glob(filepath.Join(opt.Dir, "agentry-pool-*")); len(left) != 0 {
				t.Fatalf("Close left pool members: %v", left)
			}
			if r.Pooled() != 0 {
				t.Fatalf("pooled %d after Close", r.Pooled())
			}
			// After Close, Start still works, without a pool.
			s, err := r.Start(ctx, code.StartRequest{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			s.Stop(ctx)
		})
	}
}

func hashOf(key string) string { return toolsession.HashKey(key) }
