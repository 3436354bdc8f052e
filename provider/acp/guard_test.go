package acp_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
)

// turnWithin runs a turn like tryTurn, failing the test when it has not
// ended within d: what these tests guard against is a turn that never
// ends.
func turnWithin(t *testing.T, s *provider.ValidatedSession, d time.Duration, id, input string) ([]provider.Output, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var outs []provider.Output
	for o, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: id, Input: input}) {
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("turn %s (%q) did not end within %s", id, input, d)
			}
			return outs, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// A read of anything but a regular file is refused at once: a FIFO with
// no writer (which a plain open waits on forever), a socket, a directory,
// a link to a FIFO, a device. The turn ends, the next one runs, and the
// session closes.
func TestReadsOpenNothingButRegularFiles(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	if err := syscall.Mkfifo(filepath.Join(r.ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(r.ws, "to-fifo")); err != nil {
		t.Fatal(err)
	}
	// A unix socket's path is short: bind it from inside the workspace.
	here, _ := os.Getwd()
	if err := os.Chdir(r.ws); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", "sock")
	_ = os.Chdir(here)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Mkdir(filepath.Join(r.ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	paths := []string{"fifo", filepath.Join(r.ws, "to-fifo"), "sock", "dir"}
	if os.Geteuid() == 0 {
		if err := syscall.Mknod(filepath.Join(r.ws, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, "null")
	}
	for i, p := range paths {
		outs, err := turnWithin(t, s, 30*time.Second, "r"+string(rune('a'+i)), "read "+p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		if got := said(outs); !strings.Contains(got, "not a regular file") {
			t.Errorf("read %s: the agent was told %q", p, got)
		}
	}
	if got := said(turn(t, s, "after", "hello")); got != "hello back" {
		t.Fatalf("the turn after the refusals: %q", got)
	}
	var refused int
	for _, e := range r.events.of(event.TypeACPFile) {
		if p := e.Payload.(*event.ACPFile); p.Op == "read" && strings.Contains(p.Error, "not a regular file") {
			refused++
		}
	}
	if refused != len(paths) {
		t.Errorf("%d file events say not a regular file; want %d", refused, len(paths))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx, provider.CloseRequested); err != nil {
		t.Fatalf("close: %v", err)
	}
}
