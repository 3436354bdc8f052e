package agentcore_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/agentcore"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// A process killed before it could stop its remote sessions leaves them
// running (and billed). The next runner's first Start stops those — and
// only those: a live process's sessions are left alone.
func TestStartStopsSessionsADeadProcessLeft(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	ledger := t.TempDir()
	runner := func(events func(event.Event)) *agentcore.Runner {
		r, err := agentcore.New(context.Background(), agentcore.Options{Config: testConfig(srv.URL, srv.Client()), Ledger: ledger, Events: events})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := runner(nil)
	live := start(t, a, "t=acme/p=alice/r=1")
	orphan := start(t, a, "t=acme/p=bob/r=1")
	// Make orphan look like a dead process's: its note moves to the
	// ledger of a process that no longer exists.
	me := jail.Self()
	dead := jail.Owner{Pid: me.Pid, Start: me.Start + 1}
	mine := filepath.Join(ledger, agentcore.NamePrefix+me.String())
	theirs := filepath.Join(ledger, agentcore.NamePrefix+dead.String())
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(theirs, jail.OwnerFile), []byte(dead.String()), 0o600)
	if err := os.Rename(filepath.Join(mine, orphan.ID()), filepath.Join(theirs, orphan.ID())); err != nil {
		t.Fatalf("the runner did not note its session: %v", err)
	}

	var swept []*jail.RunnerSwept
	b := runner(func(e event.Event) { swept = append(swept, e.Payload.(*jail.RunnerSwept)) })
	third, err := b.Start(context.Background(), code.StartRequest{Key: "t=acme/p=carol/r=1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(swept) != 1 || swept[0].What != "remote-sessions" || swept[0].Removed != 1 || len(swept[0].Owners) != 1 || swept[0].Owners[0] != dead.Pid {
		t.Fatalf("sweep events: %+v", swept)
	}
	fake.mu.Lock()
	orphanStopped, liveStopped := fake.sessions[orphan.ID()].stopped, fake.sessions[live.ID()].stopped
	fake.mu.Unlock()
	if !orphanStopped || liveStopped {
		t.Fatalf("orphan stopped %v (want true), live stopped %v (want false)", orphanStopped, liveStopped)
	}
	if _, err := os.Stat(theirs); !os.IsNotExist(err) {
		t.Fatalf("the dead process's ledger is still there: %v", err)
	}
	// Stop forgets a session: nothing is left to sweep.
	for _, s := range []code.Session{live, third} {
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := os.ReadDir(mine); len(left) != 1 { // the owner marker
		t.Fatalf("the ledger still lists %v", left)
	}
}
