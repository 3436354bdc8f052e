package main

import (
	"bytes"
	"context"
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

func TestUnknownCommandIsAUsageError(t *testing.T) {
	if code := run([]string{"frobnicate"}); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}
