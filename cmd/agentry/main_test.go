package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// signal.NotifyContext's watcher lives as long as the process.
		goleak.IgnoreAnyFunction("os/signal.signal_recv"))
}

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := execute(t, "version")
	if err != nil || !strings.HasPrefix(out, "agentry ") {
		t.Fatalf("version: %q, %v", out, err)
	}
}

func TestDemoTellsTheWholeStory(t *testing.T) {
	out, err := execute(t, "demo")
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		`bob reads:    "(empty)"`,
		"reused (call 2)",
		"closed: call-end",
		"closed: run-end",
		"closed: session-end",
		"closed: idle, held 16m",
		"close FAILED (run-end, timeout)",
		"closed: shutdown",
		"0 still live",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q\n%s", want, out)
		}
	}
	if strings.Contains(out, "t=acme") {
		t.Error("demo printed a raw isolation key")
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	if code := run([]string{"frobnicate"}); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}
