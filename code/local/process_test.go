package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

func TestProcessRunsEachLanguage(t *testing.T) {
	t.Parallel()
	r := local.New(options(t))
	if r.ID() != "local-process" || r.KeepsState() {
		t.Fatalf("id %q, keeps state %v", r.ID(), r.KeepsState())
	}
	for _, tc := range []struct{ lang, src, want string }{
		{"python", "print(6*7)", "42\n"},
		{"python3", "import sys; print(sys.argv[0])", "<cell>\n"},
		{"bash", `a=(1 2 3); echo "${#a[@]} $((6*7))"`, "3 42\n"},
		{"sh", `echo "$((2+3))"`, "5\n"},
	} {
		s := start(t, r, tc.lang)
		if got := mustOK(t, s, tc.src); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.lang, got, tc.want)
		}
	}
}

func TestProcessDefaultsFindPythonOnPath(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(local.Options{}), "python")
	if got := mustOK(t, s, "print('hi')"); got != "hi\n" {
		t.Fatalf("%q", got)
	}
}

func TestProcessKeepsOnlyFiles(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	mustOK(t, s, "x = 1\nopen('kept.txt', 'w').write('still here')")
	res := run(t, s, "print(x)")
	if res.OK || !strings.Contains(res.Stderr, "NameError") {
		t.Fatalf("a variable survived a process: %+v", res)
	}
	if got := mustOK(t, s, "print(open('kept.txt').read())"); got != "still here\n" {
		t.Fatalf("files must persist within the session: %q", got)
	}
}

func TestProcessEnvironmentIsAnAllowlist(t *testing.T) {
	t.Setenv("AGENTRY_TEST_SECRET", "hunter2")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI")
	opt := options(t)
	opt.Env = map[string]string{"REGION": "eu-west-1"}
	s := start(t, local.New(opt), "python")
	out := mustOK(t, s, "import os, json; print(json.dumps(dict(os.environ)))")
	var env map[string]string
	if err := json.Unmarshal([]byte(out), &env); err != nil {
		t.Fatal(err)
	}
	if env["PATH"] != os.Getenv("PATH") || env["REGION"] != "eu-west-1" || env[code.InputsEnv] != "{}" {
		t.Fatalf("environment: %v", env)
	}
	for k := range env {
		// LC_CTYPE is Python's own locale coercion (PEP 538), not the host's.
		if !slices.Contains([]string{"PATH", "REGION", code.InputsEnv, "LC_CTYPE"}, k) {
			t.Errorf("variable %s reached the code", k)
		}
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "wJalrXUtnFEMI") {
		t.Fatal("a secret in the host's environment reached the code")
	}
}

func TestProcessHasNoStdin(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	if got := mustOK(t, s, "import sys; print(repr(sys.stdin.read()))"); got != "''\n" {
		t.Fatalf("stdin: %s", got)
	}
	s2 := start(t, local.New(options(t)), "bash")
	if got := mustOK(t, s2, `read -r line; echo "rc=$? [$line]"`); got != "rc=1 []\n" {
		t.Fatalf("bash read from stdin: %q", got)
	}
}

func TestProcessFailureIsAResult(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	res := run(t, s, "import sys\nprint('before')\nsys.exit(3)")
	if res.OK || res.ExitCode == nil || *res.ExitCode != 3 || res.Stdout != "before\n" {
		t.Fatalf("%+v", res)
	}
	res = run(t, s, "def f():\n    return 1/0\nf()")
	if res.OK || *res.ExitCode != 1 || !strings.Contains(res.Stderr, `File "<cell>", line 3`) ||
		!strings.Contains(res.Stderr, "ZeroDivisionError") || strings.Contains(res.Stderr, "<string>") {
		t.Fatalf("traceback must show only the code's frames: %q", res.Stderr)
	}
	res = run(t, s, "print(")
	if res.OK || !strings.Contains(res.Stderr, "SyntaxError") {
		t.Fatalf("syntax error: %+v", res)
	}
}

func TestProcessTimeoutKillsTheWholeGroup(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "bash")
	began := time.Now()
	res, err := s.Execute(context.Background(), code.ExecRequest{
		Code:    "sleep 60 &\necho $! > child.pid\necho started\nwait",
		Timeout: 1500 * time.Millisecond,
	})
	if !errors.Is(err, code.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if time.Since(began) > 10*time.Second {
		t.Fatalf("the timeout took %s", time.Since(began))
	}
	if res.Stdout != "started\n" || res.OK {
		t.Fatalf("the output before the kill is kept: %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(dirOf(t, s), "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !waitGone(t, pid, 5*time.Second) {
		t.Fatalf("the background child %d outlived the timeout", pid)
	}
	// The session itself is fine: a process runner has nothing to break.
	mustOK(t, s, "echo again")
}

func TestProcessBackgroundChildDoesNotOutliveTheCall(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "bash")
	began := time.Now()
	res := run(t, s, "sleep 60 &\necho $! > child.pid\necho done")
	if !res.OK || res.Stdout != "done\n" || time.Since(began) > 10*time.Second {
		t.Fatalf("%+v after %s", res, time.Since(began))
	}
	b, _ := os.ReadFile(filepath.Join(dirOf(t, s), "child.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !waitGone(t, pid, 5*time.Second) {
		t.Fatalf("background child %d outlived its call", pid)
	}
}

func TestProcessCancellationKills(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := s.Execute(ctx, code.ExecRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(60)"})
		res <- err
	}()
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestProcessCutsEachStreamAndSaysSo(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	res := run(t, s, "import sys\nsys.stdout.write('a' * 10000)\nsys.stderr.write('é' * 9000)")
	if utf8.RuneCountInString(res.Stdout) != local.DefaultMaxOutputChars || utf8.RuneCountInString(res.Stderr) != local.DefaultMaxOutputChars {
		t.Fatalf("kept %d and %d characters", utf8.RuneCountInString(res.Stdout), utf8.RuneCountInString(res.Stderr))
	}
	if res.Truncated == nil || !res.Truncated.Stdout || !res.Truncated.Stderr || res.Truncated.OfChars != 10000 {
		t.Fatalf("truncation %+v", res.Truncated)
	}
	res = run(t, s, "print('short')")
	if res.Truncated != nil {
		t.Fatalf("nothing was cut, yet Truncated = %+v", res.Truncated)
	}
	opt := options(t)
	opt.MaxOutputChars = 5
	s2 := start(t, local.New(opt), "python")
	res = run(t, s2, "print('x' * 40000000, end='')")
	if res.Stdout != "xxxxx" || res.Truncated == nil || res.Truncated.OfChars != 40000000 || res.Truncated.Stderr {
		t.Fatalf("40M characters: kept %q, %+v", res.Stdout, res.Truncated)
	}
}

func TestProcessRefusesByName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := local.New(options(t)).Start(ctx, code.StartRequest{Key: "k", Language: "cobol"})
	if !errors.Is(err, local.ErrUnknownLanguage) || !strings.Contains(err.Error(), "bash, python, sh") ||
		!strings.Contains(err.Error(), "Options.Commands") {
		t.Fatalf("unknown language: %v", err)
	}
	r := local.New(local.Options{Commands: map[string]string{"python": "python-that-is-not-there"}})
	_, err = r.Start(ctx, code.StartRequest{Key: "k", Language: "python"})
	if !errors.Is(err, local.ErrInterpreterMissing) || !strings.Contains(err.Error(), "apt-get install python3") {
		t.Fatalf("missing interpreter: %v", err)
	}
	s := start(t, local.New(options(t)), "python")
	if _, err := s.Execute(ctx, code.ExecRequest{Code: "x", Language: "cobol"}); !errors.Is(err, local.ErrUnknownLanguage) {
		t.Fatalf("Execute in an unknown language: %v", err)
	}
	bad := local.New(local.Options{Env: map[string]string{code.InputsEnv: "{}"}})
	if _, err := bad.Start(ctx, code.StartRequest{Key: "k"}); err == nil || !strings.Contains(err.Error(), code.InputsEnv) {
		t.Fatalf("reserved variable: %v", err)
	}
}

func TestProcessStopIsFinal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := local.New(options(t))
	s, err := r.Start(ctx, code.StartRequest{Key: "k", Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	dir := dirOf(t, s)
	mustOK(t, s, "open('x', 'w').write('1')")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the session directory survived Stop: %v", err)
	}
	_, err = s.Execute(ctx, code.ExecRequest{Code: "print(1)"})
	if !errors.Is(err, code.ErrStopped) || !strings.Contains(err.Error(), s.ID()) {
		t.Fatalf("Execute after Stop: %v; it must name the stopped session", err)
	}
	if _, err := s.(code.Stager).Stage(ctx, []code.Input{{Name: "a", Data: nil}}); !errors.Is(err, code.ErrStopped) {
		t.Fatalf("Stage after Stop: %v", err)
	}
}

func TestProcessStopKillsARunningExecute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := local.New(options(t)).Start(ctx, code.StartRequest{Key: "k", Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Execute(ctx, code.ExecRequest{Code: "import time\ntime.sleep(60)"})
		done <- err
	}()
	// Wait until the process is running: its working directory holds the
	// marker it writes first... the code above writes none, so stop as
	// soon as Execute is in flight either way; both orders must end it.
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, code.ErrStopped) {
		t.Fatalf("a stopped session's execute returned %v", err)
	}
}

func TestProcessReportsArtifacts(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	res := run(t, s, "print('nothing written')")
	if res.Artifacts == nil || len(res.Artifacts) != 0 {
		t.Fatalf("a runner that reports outputs says 'none' with an empty slice, got %#v", res.Artifacts)
	}
	res = run(t, s, "import os\nos.makedirs('out', exist_ok=True)\nopen('out/report.csv', 'w').write('a,b\\n1,2\\n')")
	want := code.Artifact{Name: "out/report.csv", Bytes: 8, URI: "file://" + filepath.Join(dirOf(t, s), "out/report.csv")}
	if len(res.Artifacts) != 1 || res.Artifacts[0] != want {
		t.Fatalf("artifacts %+v, want %+v", res.Artifacts, want)
	}
	res = run(t, s, "print(open('out/report.csv').read())")
	if len(res.Artifacts) != 0 || res.Truncated != nil {
		t.Fatalf("reading a file is not producing it: %+v %+v", res.Artifacts, res.Truncated)
	}
	// A long list is cut, and the cut is stated with the count.
	res = run(t, s, "for i in range(73):\n    open('many-%02d.txt' % i, 'w').write('x')")
	if len(res.Artifacts) != 50 || res.Truncated == nil || !res.Truncated.Artifacts || res.Truncated.OfArtifacts != 73 ||
		res.Truncated.Stdout || res.Truncated.Stderr {
		t.Fatalf("73 files: %d listed, truncation %+v; want 50 listed and the cut stated as of 73", len(res.Artifacts), res.Truncated)
	}
}
