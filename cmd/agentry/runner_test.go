package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

func TestNewRunner(t *testing.T) {
	ctx := context.Background()
	jailWorks := local.CheckJail(ctx, local.Jail{}) == nil
	tests := []struct {
		kind, wantID string
	}{
		{"process", "local-process"},
		{"interpreter", "local-interpreter"},
	}
	if jailWorks {
		tests = append(tests, struct{ kind, wantID string }{"jail", "local-interpreter+bwrap"}, struct{ kind, wantID string }{"", "local-interpreter+bwrap"})
	} else {
		t.Logf("LOUD: bubblewrap cannot build a jail on this machine; the jailed kinds are checked for their refusal only")
	}
	for _, tc := range tests {
		var warn bytes.Buffer
		r, err := newRunner(ctx, tc.kind, local.Options{}, &warn)
		if err != nil || r.ID() != tc.wantID || warn.Len() != 0 {
			t.Fatalf("kind %q: %v, %v, warning %q; want %s", tc.kind, runnerID(r), err, warn.String(), tc.wantID)
		}
	}
}

func TestNewRunnerWithoutBubblewrap(t *testing.T) {
	ctx := context.Background()
	missing := local.Options{Jail: &local.Jail{Bwrap: "/nonexistent/bwrap"}}
	var warn bytes.Buffer
	r, err := newRunner(ctx, "", missing, &warn)
	if err != nil || r.ID() != "local-interpreter" {
		t.Fatalf("default without bwrap: %v, %v", runnerID(r), err)
	}
	if !strings.Contains(warn.String(), "UNJAILED") || !strings.Contains(warn.String(), "bubblewrap") {
		t.Fatalf("the fallback must be loud: %q", warn.String())
	}
	_, err = newRunner(ctx, "jail", missing, &warn)
	var ee *exitError
	if !errors.Is(err, local.ErrNoJail) || !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Fatalf("--runner jail without bwrap: %v", err)
	}
	_, err = newRunner(ctx, "docker", local.Options{}, &warn)
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "process, interpreter or jail") {
		t.Fatalf("unknown kind: %v", err)
	}
}

func runnerID(r code.Runner) string {
	if r == nil {
		return "<nil>"
	}
	return r.ID()
}
