package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// What an ACP agent asks outside a turn reaches the terminal; with no
// terminal a question is declined and stderr says so, and a notice is
// shown and acknowledged.
func TestRunTerminalInteractions(t *testing.T) {
	var errs strings.Builder
	ti := &termInteractions{stdin: strings.NewReader("staging\n"), stderr: &errs}
	r, err := ti.Interact(context.Background(), "s", provider.Interaction{ID: "i1", Kind: provider.InteractionQuestion,
		Message: "Which database?", Options: []string{"staging", "prod"}})
	if err != nil || !r.Declined || r.Answer != "" {
		t.Fatalf("a question without a terminal: %+v %v", r, err)
	}
	if !strings.Contains(errs.String(), "Which database?") || !strings.Contains(errs.String(), "not a terminal") {
		t.Fatalf("stderr: %q", errs.String())
	}
	r, err = ti.Interact(context.Background(), "s", provider.Interaction{ID: "i2", Kind: provider.InteractionNotice, Message: "Indexing the repository"})
	if err != nil || r.Declined || !strings.Contains(errs.String(), "Indexing the repository") {
		t.Fatalf("a notice: %+v %v %q", r, err, errs.String())
	}
}

// Each refused connection is one line naming the target and the flag
// that would allow it; a target an agent made up is quoted; what the
// bound queue could not hold is counted at the end.
func TestRefusedNotices(t *testing.T) {
	var out lockedBuffer
	n := newRefusedNotices(&out)
	n.Export(event.Event{Type: jail.TypeRefused, Payload: &jail.Refused{Target: "api.example.com:443", Via: "proxy"}})
	n.Export(event.Event{Type: jail.TypeRefused, Payload: &jail.Refused{Target: "a b\n:1", Via: "proxy", Suppressed: 3}})
	n.Export(event.Event{Type: jail.TypeRefused, Payload: &jail.Refused{Suppressed: 12}})
	n.Export(event.Event{Type: acp.TypeFile, Payload: &acp.FileEvent{}})
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.Export(event.Event{Type: jail.TypeRefused, Payload: &jail.Refused{Target: "late:1"}}) // after Close: dropped quietly
	want := "agentry: the jail refused the agent's connection to api.example.com:443: it is not on the allowlist; to allow it, pass --agent-allow-host api.example.com:443\n" +
		`agentry: the jail refused the agent's connection to "a b\n:1": it is not on the allowlist; to allow it, pass --agent-allow-host "a b\n:1" (3 more were refused before it and not reported)` + "\n" +
		"agentry: 12 more connections of the agent were refused and not reported one by one\n"
	if got := out.String(); got != want {
		t.Fatalf("printed:\n%s\nwant:\n%s", got, want)
	}

	// A writer that never returns holds up nothing but its own lines.
	block := make(chan struct{})
	stuck := newRefusedNotices(blockingWriter(block))
	for range 200 {
		stuck.Export(event.Event{Type: jail.TypeRefused, Payload: &jail.Refused{Target: "x:1"}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := stuck.Close(ctx); err == nil {
		t.Fatal("Close did not give up on a writer that never returns")
	}
	close(block)
	<-stuck.done
}

type blockingWriter chan struct{}

func (b blockingWriter) Write(p []byte) (int, error) {
	<-b
	return len(p), nil
}
