package local_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

func TestInterpreterKeepsState(t *testing.T) {
	t.Parallel()
	r := local.NewInterpreter(options(t))
	if r.ID() != "local-interpreter" || !r.KeepsState() {
		t.Fatalf("id %q keeps state %v", r.ID(), r.KeepsState())
	}
	s := start(t, r, "python")
	mustOK(t, s, "import json\nrows = [{'amount': a} for a in range(1, 101)]\ndef total(rs):\n    return sum(r['amount'] for r in rs)")
	if got := mustOK(t, s, "print(total(rows), json.dumps(len(rows)))"); got != "5050 100\n" {
		t.Fatalf("state did not persist: %q", got)
	}
	// A failure does not lose the state either.
	if res := run(t, s, "raise ValueError('bad row')"); res.OK || *res.ExitCode != 1 || !strings.Contains(res.Stderr, "ValueError: bad row") {
		t.Fatalf("%+v", res)
	}
	if res := run(t, s, "import sys\nsys.exit(4)"); res.OK || *res.ExitCode != 4 {
		t.Fatalf("sys.exit(4): %+v", res)
	}
	if got := mustOK(t, s, "print(len(rows))"); got != "100\n" {
		t.Fatalf("after a failure: %q", got)
	}
	// Modules the code writes can be imported from the working directory.
	mustOK(t, s, "open('helpers.py', 'w').write('def double(x):\\n    return 2 * x\\n')")
	if got := mustOK(t, s, "import helpers\nprint(helpers.double(21))"); got != "42\n" {
		t.Fatalf("%q", got)
	}
}

func TestInterpreterTracebackShowsOnlyTheCode(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	res := run(t, s, "def f():\n    return {}['missing']\nf()")
	if res.OK || !strings.Contains(res.Stderr, `File "<cell>", line 3`) || strings.Contains(res.Stderr, "driver") ||
		strings.Contains(res.Stderr, "<string>") {
		t.Fatalf("traceback: %q", res.Stderr)
	}
	res = run(t, s, "def broken(:\n  pass")
	if res.OK || !strings.Contains(res.Stderr, "SyntaxError") {
		t.Fatalf("syntax error: %+v", res)
	}
}

// TestInterpreterFramingSurvivesAnyBytes prints what could confuse a
// marker-based protocol: every byte value, fake frames, fake replies,
// invalid UTF-8, and a flood; the next execute still works.
func TestInterpreterFramingSurvivesAnyBytes(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	evil := []string{
		`import sys; sys.stdout.buffer.write(bytes(range(256)))`,
		`import os, struct, json; b = json.dumps({"id": 99, "ok": True, "exit": 0}).encode(); os.write(1, struct.pack(">I", len(b)) + b); os.write(2, b"\x00\x00\x00\x10{\"ready\": true}")`,
		`print('{"ok": true, "exit": 0}\n' * 3)`,
		`import sys; sys.stdout.buffer.write(b"\xff\xfe\xc3(\xe2\x82")`,
		`import os; os.write(1, b"\x00" * 200000)`,
	}
	for _, src := range evil {
		res, err := s.Execute(context.Background(), code.ExecRequest{Code: src})
		if err != nil || !res.OK {
			t.Fatalf("%q: %v %+v", src, err, res)
		}
	}
	res := run(t, s, `import sys; sys.stdout.buffer.write(bytes(range(256)))`)
	if res.Stdout != string(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}()) {
		t.Fatalf("the bytes came back changed: %q", res.Stdout)
	}
	if got := mustOK(t, s, "print('still framed')"); got != "still framed\n" {
		t.Fatalf("%q", got)
	}
}

// FuzzInterpreterOutput sends arbitrary bytes through one interpreter and
// checks that exactly those bytes come back, and that the session still
// works afterwards.
func FuzzInterpreterOutput(f *testing.F) {
	f.Add([]byte("plain\n"), []byte(""))
	f.Add([]byte("\x00\x00\x00\x05{\"ok\":true}"), []byte("\xff\xfe"))
	f.Add([]byte("\xe2\x82"), []byte("\x82\xac"))
	f.Add(bytes.Repeat([]byte{0}, 70000), []byte("{\"id\": 1}"))
	s, err := local.NewInterpreter(options(f)).Start(context.Background(), code.StartRequest{Key: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Stop(context.Background())
	opt := 0
	f.Fuzz(func(t *testing.T, out, errs []byte) {
		if len(out) > local.DefaultMaxOutputChars || len(errs) > local.DefaultMaxOutputChars {
			// Cuts count characters; keep to inputs that are never cut.
			out, errs = out[:min(len(out), 1000)], errs[:min(len(errs), 1000)]
		}
		opt++
		src := fmt.Sprintf("import sys\nsys.stdout.buffer.write(bytes.fromhex(%q))\nsys.stderr.buffer.write(bytes.fromhex(%q))",
			hex.EncodeToString(out), hex.EncodeToString(errs))
		res, err := s.Execute(context.Background(), code.ExecRequest{Code: src})
		if err != nil || !res.OK {
			t.Fatalf("execute %d: %v %+v", opt, err, res)
		}
		if res.Stdout != string(out) || res.Stderr != string(errs) {
			t.Fatalf("bytes changed in transit:\nstdout %q\n  want %q\nstderr %q\n  want %q", res.Stdout, out, res.Stderr, errs)
		}
	})
}

func TestInterpreterTimeoutBreaksTheSession(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	mustOK(t, s, "x = 1")
	res, err := s.Execute(context.Background(), code.ExecRequest{
		Code:    "import time\nprint('working', flush=True)\ntime.sleep(60)",
		Timeout: time.Second,
	})
	if !errors.Is(err, code.ErrTimeout) || errors.Is(err, code.ErrBroken) {
		t.Fatalf("err = %v, want ErrTimeout (the next call is the one that finds it broken)", err)
	}
	if res.Stdout != "working\n" {
		t.Fatalf("output before the timeout is kept: %q", res.Stdout)
	}
	_, err = s.Execute(context.Background(), code.ExecRequest{Code: "print(x)"})
	if !errors.Is(err, code.ErrBroken) || !strings.Contains(err.Error(), "timeout") || !strings.Contains(err.Error(), "start a new session") {
		t.Fatalf("the next execute must say the session is broken and why: %v", err)
	}
	if _, err := s.(code.Stager).Stage(context.Background(), []code.Input{{Name: "a"}}); !errors.Is(err, code.ErrBroken) {
		t.Fatalf("Stage on a broken session: %v", err)
	}
}

func TestInterpreterCrashBreaksTheSession(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	res := run(t, s, "import os\nprint('last words', flush=True)\nos._exit(7)")
	if res.OK || res.ExitCode == nil || *res.ExitCode != 7 || res.Stdout != "last words\n" ||
		!strings.Contains(res.Stderr, "state is lost") {
		t.Fatalf("a crash is a failed result that says so: %+v", res)
	}
	_, err := s.Execute(context.Background(), code.ExecRequest{Code: "print(1)"})
	if !errors.Is(err, code.ErrBroken) || !strings.Contains(err.Error(), "status 7") {
		t.Fatalf("after a crash: %v", err)
	}
	// Stop on an interpreter that is already gone is success.
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestInterpreterSurvivesTheCodeMessingWithItsStreams(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	mustOK(t, s, "import sys, io\nsys.stdout = io.StringIO()")
	if got := mustOK(t, s, "print('back')"); got != "back\n" {
		t.Fatalf("after replacing sys.stdout: %q", got)
	}
	mustOK(t, s, "import sys\nsys.stdout.close()")
	if got := mustOK(t, s, "print('again')"); got != "again\n" {
		t.Fatalf("after closing sys.stdout: %q", got)
	}
	// Output a background thread prints after its execute returns does
	// not leak into the next execute.
	mustOK(t, s, "import threading, time\ndef chatter():\n    for _ in range(50):\n        print('late', flush=True)\n        time.sleep(0.01)\nthreading.Thread(target=chatter, daemon=True).start()")
	for range 5 {
		if got := mustOK(t, s, "print('mine')"); got != "mine\n" {
			t.Fatalf("another execute's output leaked in: %q", got)
		}
	}
}

func TestInterpreterExecutesTakeTurns(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	mustOK(t, s, "n = 0")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res, err := s.Execute(context.Background(), code.ExecRequest{Code: "v = n\nn = v + 1"})
			if err != nil || !res.OK {
				t.Errorf("%v %+v", err, res)
			}
		})
	}
	wg.Wait()
	if got := mustOK(t, s, "print(n)"); got != "8\n" {
		t.Fatalf("concurrent executes interleaved: n = %q", got)
	}
}

func TestInterpreterStopIsFinalAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := local.NewInterpreter(options(t)).Start(ctx, code.StartRequest{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	dir := dirOf(t, s)
	pid := s.(interface{ Pid() int }).Pid()
	mustOK(t, s, "x = 1")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !waitGone(t, pid, 5*time.Second) {
		t.Fatal("the interpreter outlived Stop")
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the session directory outlived Stop: %v", err)
	}
	_, err = s.Execute(ctx, code.ExecRequest{Code: "print(x)"})
	if !errors.Is(err, code.ErrStopped) || !strings.Contains(err.Error(), s.ID()) {
		t.Fatalf("Execute after Stop: %v", err)
	}
}

func TestInterpreterStopDuringAnExecute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := local.NewInterpreter(options(t)).Start(ctx, code.StartRequest{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, s, "import time")
	done := make(chan error, 1)
	go func() {
		_, err := s.Execute(ctx, code.ExecRequest{Code: "time.sleep(60)"})
		done <- err
	}()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, code.ErrStopped) {
		t.Fatalf("the execute cut by Stop returned %v", err)
	}
}

func TestInterpreterRefusesByName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := local.NewInterpreter(options(t))
	if _, err := r.Start(ctx, code.StartRequest{Key: "k", Language: "bash"}); !errors.Is(err, local.ErrUnknownLanguage) ||
		!strings.Contains(err.Error(), "local.New") {
		t.Fatalf("bash on the interpreter: %v", err)
	}
	missing := local.NewInterpreter(local.Options{Commands: map[string]string{"python": "/nonexistent/python3"}})
	if _, err := missing.Start(ctx, code.StartRequest{Key: "k"}); !errors.Is(err, local.ErrInterpreterMissing) {
		t.Fatalf("missing python: %v", err)
	}
}

func TestInterpreterThatNeverBecomesReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mute := filepath.Join(dir, "python-mute")
	if err := os.WriteFile(mute, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "python-broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'this python is broken' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := local.NewInterpreter(local.Options{Commands: map[string]string{"python": mute}, StartTimeout: 300 * time.Millisecond})
	if _, err := r.Start(ctx, code.StartRequest{Key: "k"}); err == nil || !strings.Contains(err.Error(), "not ready within 300ms") {
		t.Fatalf("a mute interpreter: %v", err)
	}
	r = local.NewInterpreter(local.Options{Commands: map[string]string{"python": broken}})
	if _, err := r.Start(ctx, code.StartRequest{Key: "k"}); err == nil || !strings.Contains(err.Error(), "this python is broken") {
		t.Fatalf("a broken interpreter must show what it said: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r = local.NewInterpreter(local.Options{Commands: map[string]string{"python": mute}})
	if _, err := r.Start(cctx, code.StartRequest{Key: "k"}); !strings.Contains(fmt.Sprint(err), "context canceled") {
		t.Fatalf("a cancelled start: %v", err)
	}
}

func TestInterpreterLifeIsNotTheStartContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := local.NewInterpreter(options(t)).Start(ctx, code.StartRequest{Key: "k"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	if got := mustOK(t, s, "print('alive')"); got != "alive\n" {
		t.Fatalf("%q", got)
	}
}

func TestInterpreterReportsArtifacts(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) { testArtifacts(t, options(t)) })
	t.Run("jailed", func(t *testing.T) { testArtifacts(t, jailed(t, options(t))) })
}

func testArtifacts(t *testing.T, opt local.Options) {
	s := start(t, local.NewInterpreter(opt), "python")
	names := func(res code.Result) string {
		var n []string
		for _, a := range res.Artifacts {
			n = append(n, fmt.Sprintf("%s:%d", a.Name, a.Bytes))
		}
		return strings.Join(n, ",")
	}
	steps := []struct{ src, want string }{
		{"x = 1", ""},
		{"open('a.txt', 'w').write('12345')", "a.txt:5"},
		{"y = 2", ""},
		{"import os\nos.makedirs('deep/er')\nopen('deep/er/b.csv', 'w').write('1,2')", "deep/er/b.csv:3"},
		{"open('deep/er/b.csv', 'a').write(',3')", "deep/er/b.csv:5"},
		{"open('a.txt', 'w').write('54321')", "a.txt:5"},
		{"print(open('a.txt').read())", ""},
		{"import os\nos.remove('a.txt')", ""},
	}
	for _, st := range steps {
		res := run(t, s, st.src)
		if !res.OK || res.Artifacts == nil || names(res) != st.want {
			t.Fatalf("%q: artifacts %q, want %q (%+v)", st.src, names(res), st.want, res)
		}
	}
	// Staged inputs are not the code's artifacts.
	if _, err := s.(code.Stager).Stage(context.Background(), []code.Input{{Name: "in.csv", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if res := run(t, s, "z = 3"); len(res.Artifacts) != 0 {
		t.Fatalf("staging showed up as artifacts: %+v", res.Artifacts)
	}
}

func TestInterpreterCancellationBreaksTheSession(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	mustOK(t, s, "import time")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Execute(ctx, code.ExecRequest{Code: "print('started', flush=True)\ntime.sleep(60)"})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled execute returned %v", err)
	}
	// Whether the cancel beat the request or not, the session is not
	// left half-way: it either still works or says it is broken.
	_, err := s.Execute(context.Background(), code.ExecRequest{Code: "print(1)"})
	if err != nil && !errors.Is(err, code.ErrBroken) {
		t.Fatalf("after a cancel: %v", err)
	}
}

func TestInterpreterBackgroundOutputGoesNowhere(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(options(t)), "python")
	mustOK(t, s, "import sys, threading, time\ndone = threading.Event()\ndef chatter():\n    for _ in range(2000):\n        sys.__stderr__.write('x' * 1000)\n    done.set()\nthreading.Thread(target=chatter, daemon=True).start()")
	mustOK(t, s, "done.wait(10)")
	log := filepath.Join(filepath.Dir(dirOf(t, s)), "driver.log")
	if fi, err := os.Stat(log); err != nil || fi.Size() > 0 {
		t.Fatalf("stderr between executes reached the start-up log: %v %v", fi, err)
	}
}
