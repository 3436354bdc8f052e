package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// buildAgentry builds the real binary into dir.
func buildAgentry(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "agentry")
	cmd := exec.Command(goTool(), "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// exe runs the binary and returns its stdout, stderr and exit status.
func exe(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("running %s: %v", bin, err)
	return "", "", -1
}

// The command as a user runs it: the built binary, its exit statuses, a
// real SIGINT, and agentry mcp over a real stdio pipe to the Go SDK's
// client.
func TestBinary(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	bin := buildAgentry(t, dir)

	t.Run("run prints 42", func(t *testing.T) {
		out, errout, code := exe(t, bin, nil, "run", "print(6*7)")
		if code != 0 || out != "42\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errout)
		}
	})

	t.Run("exit statuses and one-line reasons", func(t *testing.T) {
		out, errout, code := exe(t, bin, nil, "run")
		if code != 2 || out != "" || errout != "agentry: run takes exactly one MESSAGE (0 given); quote it: agentry run 'print(6*7)'\n" {
			t.Fatalf("no message: exit %d, %q, %q", code, out, errout)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		out, errout, code = exe(t, bin, []string{"OPENAI_BASE_URL=http://" + addr + "/v1"}, "run", "--runner", "process", "--model", "openai:m", "what is 6*7?")
		if code != 1 || out != "" || strings.Count(errout, "\n") != 1 || !strings.HasPrefix(errout, "agentry: the run failed:") {
			t.Fatalf("a failed run: exit %d, %q, %q", code, out, errout)
		}
		out, _, code = exe(t, bin, nil, "run", "--help")
		for _, v := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OLLAMA_HOST", "--approve", "--json"} {
			if code != 0 || !strings.Contains(out, v) {
				t.Errorf("run --help (exit %d) lacks %s", code, v)
			}
		}
	})

	t.Run("SIGINT stops the turn and closes the interpreter", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "started")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		events := filepath.Join(t.TempDir(), "e.ndjson")
		prog := "import os, time\nf = open(" + strconv.Quote(fifo) + ", 'w'); f.write(str(os.getpid())); f.close()\ntime.sleep(120)"
		cmd := exec.Command(bin, "run", "--runner", "interpreter", "--events", events, prog)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(fifo)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(string(b))
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "interrupt signal received") {
			t.Fatalf("after SIGINT: %v, stdout %q, stderr %q", err, out.String(), errb.String())
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("the interpreter (pid %d) outlived agentry: %v", pid, err)
		}
		auditClean(t, events, 1)
	})

	t.Run("mcp over stdio with the Go SDK client", func(t *testing.T) {
		events := filepath.Join(t.TempDir(), "mcp.ndjson")
		cmd := exec.Command(bin, "mcp", "--events", events)
		var errb syncBuffer
		cmd.Stderr = &errb
		cs, err := newClient().Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, errb.String())
		}
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "run_code" {
			t.Fatalf("tools %+v, %v", tools, err)
		}
		if out, isErr := callText(t, cs, "print(6*7)"); out != "42" || isErr {
			t.Fatalf("print(6*7): %q, %v", out, isErr)
		}
		if err := cs.Close(); err != nil {
			t.Fatalf("close: %v\n%s", err, errb.String())
		}
		if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
			t.Fatalf("agentry mcp did not exit cleanly after the client left: %v\n%s", cmd.ProcessState, errb.String())
		}
		rep := auditClean(t, events, 1)
		if rep.Tools[0].Scope != "call" || rep.Tools[0].Closed["call-end"] != 1 {
			t.Fatalf("the call's session: %+v", rep.Tools[0])
		}
		where := "UNJAILED"
		if jailWorks() {
			where = "jailed with bubblewrap"
		}
		if !strings.Contains(errb.String(), where) {
			t.Fatalf("stderr does not say where code runs (%s):\n%s", where, errb.String())
		}
	})

	t.Run("demo", func(t *testing.T) {
		events := filepath.Join(t.TempDir(), "demo.ndjson")
		out, errout, code := exe(t, bin, nil, "demo", "--events", events)
		if code != 0 || !strings.Contains(out, "verdict: zero leaks") {
			t.Fatalf("demo: exit %d\n%s\n%s", code, out, errout)
		}
		auditClean(t, events, 3)
	})
}
