package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/provider"
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
