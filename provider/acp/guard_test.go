package acp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
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
	ln, err := net.Listen("unix", filepath.Join(r.ws, "sock"))
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
	for _, e := range r.events.of(acp.TypeFile) {
		if p := e.Payload.(*acp.FileEvent); p.Op == "read" && strings.Contains(p.Error, "not a regular file") {
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

// burst runs "burst N R GATE" in s: once the agent says R of its N
// requests were refused, GATE is written (unless hold), so the ones let
// through end. It returns what the agent said.
func burst(t *testing.T, s *provider.ValidatedSession, ws, id string, n, refused int, hold ...bool) string {
	t.Helper()
	gate := filepath.Join(ws, "gate-"+id)
	if err := syscall.Mkfifo(gate, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var text strings.Builder
	opened := len(hold) > 0 && hold[0]
	for o, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: id, Input: fmt.Sprintf("burst %d %d %s", n, refused, gate)}) {
		if err != nil {
			t.Fatalf("burst: %v (said %q)", err, text.String())
		}
		text.WriteString(o.Text)
		if !opened && o.Kind == provider.OutputText && strings.HasPrefix(o.Text, "busy ") {
			opened = true
			f, err := os.OpenFile(gate, os.O_WRONLY, 0) // waits for cat to open it
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.WriteString("go\n")
			f.Close()
		}
	}
	return text.String()
}

// At most limits.maxClientRequests of an agent's requests are in flight:
// the rest are answered at once with an error that says the bound and
// what to do; once answers go out, slots come back.
func TestRequestsPastTheSessionBoundAreRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, func(c *acp.Config) { c.Limits.MaxClientRequests = 4 })), "s1")
	got := burst(t, s, r.ws, "b1", 6, 2)
	if !strings.Contains(got, "done ok=4 busy=2 other=\n") && !strings.HasSuffix(got, "done ok=4 busy=2 other=") {
		t.Fatalf("a burst of 6 against a bound of 4: %q", got)
	}
	if !strings.Contains(got, "at most 4 at once for one session; wait for an answer") || !strings.Contains(got, `"code":-32603`) {
		t.Fatalf("the refusal says %q", got)
	}
	// Every slot came back: the same burst is refused the same way.
	if got := burst(t, s, r.ws, "b2", 6, 2); !strings.HasSuffix(got, "done ok=4 busy=2 other=") {
		t.Fatalf("the second burst: %q", got)
	}
	if got := said(turn(t, s, "after", "hello")); got != "hello back" {
		t.Fatalf("after the bursts: %q", got)
	}
	if len(r.events.of(acp.TypeAgentCutOff)) != 0 {
		t.Fatal("a burst that waits for its answers was taken for a flood")
	}
}

// Options.MaxClientRequests bounds every agent's requests together.
func TestRequestsPastTheHostBoundAreRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, func(o *acp.Options) { o.MaxClientRequests = 3 })
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	got := burst(t, s, r.ws, "b1", 4, 1)
	if !strings.HasSuffix(got, "done ok=3 busy=1 other=") || !strings.Contains(got, "on this host (3 across every session)") {
		t.Fatalf("a burst of 4 against a host bound of 3: %q", got)
	}
}

// A request that waits on a command is answered with an error once
// limits.clientWaitTimeout has passed.
func TestAWaitPastItsDeadlineIsAnswered(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, func(c *acp.Config) { c.Limits.ClientWaitTimeout = acp.Duration(200 * time.Millisecond) })), "s1")
	got := burst(t, s, r.ws, "w1", 1, 0, true)
	if !strings.Contains(got, "done ok=0 busy=0 other=") || !strings.Contains(got, "took longer than the client allows (limits.clientWaitTimeout, 200ms)") {
		t.Fatalf("a wait past its deadline: %q", got)
	}
}

// An agent that sends 10,000 requests without waiting is cut off: the
// guard refuses what is past its bound, counts a flood, stops the agent
// and says why; the turn fails, the session is quarantined and closes,
// and another session of the same agent answers.
func TestAFloodingAgentIsCutOff(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, nil))
	other := r.create(inst, "other")
	s := r.create(inst, "s1")
	if err := os.WriteFile(filepath.Join(r.ws, "a.txt"), []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	outs, err := turnWithin(t, s, time.Minute, "f1", "flood 10000 a.txt")
	if err == nil {
		t.Fatalf("the flood's turn ended well: %q", said(outs))
	}
	if !errors.Is(err, acp.ErrAgentExited) || !strings.Contains(err.Error(), "(a flood)") {
		t.Fatalf("the flood's turn failed with %v", err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after a flood the session says %v; want session_unusable", s.Err())
	}
	cuts := r.events.of(acp.TypeAgentCutOff)
	if len(cuts) != 1 {
		t.Fatalf("%d agent_cut_off events", len(cuts))
	}
	cut := cuts[0].Payload.(*acp.AgentCutOff)
	if cuts[0].Meta.SessionID != "s1" || cut.Reason != "flood" || cut.Limit != acp.DefaultMaxClientRequests || cut.Refused != 8*acp.DefaultMaxClientRequests {
		t.Fatalf("the cut: %s %+v", cuts[0].Meta.SessionID, *cut)
	}
	if got := said(turn(t, other, "o1", "hello")); got != "hello back" {
		t.Fatalf("the other session: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx, provider.CloseRequested); err != nil {
		t.Fatalf("closing the flooded session: %v", err)
	}
}
