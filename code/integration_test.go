package code_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func realPython(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("these tests need python3 (Debian: apt-get install python3)")
	}
	return p
}

// The whole path on the real persistent interpreter: staged data, state
// across calls of one run, a stated cut, a timeout, the fresh session that
// follows it, and the run's end closing it.
func TestToolOnTheLocalInterpreter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDoor(allScopes()...)
	runner := local.NewInterpreter(local.Options{Commands: map[string]string{"python": realPython(t)}})
	tl := code.NewTool(runner, code.ToolOptions{
		Timeout: 2 * time.Second,
		Events:  d.emit,
		Inputs: func(context.Context, *tool.Call) ([]code.Input, error) {
			var b strings.Builder
			b.WriteString("region,amount\n")
			for i := range 5000 {
				b.WriteString([]string{"eu", "us", "apac"}[i%3] + ",10\n")
			}
			return []code.Input{{Name: "sales.csv", Data: []byte(b.String())}}, nil
		},
	})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	call := func(callID, src string) tool.Result {
		t.Helper()
		res, err := d.call(ctx, tl, callID, "run-1", "", id, src)
		if err != nil {
			t.Fatalf("%s: %v", callID, err)
		}
		return res
	}

	res := call("c1", `import os, json, csv
rows = list(csv.DictReader(open(json.loads(os.environ["AGENTRY_INPUTS"])["sales.csv"])))
print(len(rows))`)
	if !strings.HasPrefix(res.Content, "[inputs staged: 1 file(s)") || !strings.HasSuffix(res.Content, "\n5000") {
		t.Fatalf("first call:\n%s", res.Content)
	}
	res = call("c2", `from collections import Counter
print(sorted(Counter(r["region"] for r in rows).items()))`)
	if res.Content != "[('apac', 1666), ('eu', 1667), ('us', 1667)]" {
		t.Fatalf("state across calls:\n%s", res.Content)
	}
	res = call("c3", `print(rows)`)
	if !strings.Contains(res.Content, "[truncated: showing 4000 of ") || !strings.Contains(res.Content, "aggregate") {
		t.Fatalf("a big print must be cut and the cut stated:\n%.300s", res.Content)
	}
	res = call("c4", "while True:\n    pass")
	if !res.IsError || !strings.Contains(res.Content, "[timed out") {
		t.Fatalf("timeout:\n%s", res.Content)
	}
	res = call("c5", "print(len(rows))")
	if !strings.HasPrefix(res.Content, "[new session:") || !strings.Contains(res.Content, "NameError") ||
		!strings.Contains(res.Content, "[inputs staged") {
		t.Fatalf("after the timeout the model must learn its state is gone (and its inputs are back):\n%s", res.Content)
	}

	runs := d.codeRuns()
	if len(runs) != 5 || !runs[2].Truncated || runs[3].OK || runs[4].StagedInputs != 1 || runs[0].StagedInputs != 1 ||
		runs[0].RunnerID != "local-interpreter" {
		t.Fatalf("code_run events: %+v", runs)
	}
	if n := d.tier.FireRun(ctx, "run-1"); n != 1 {
		t.Fatalf("run end closed %d sessions, want 1", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.closures) != 1 || d.closures[0].Failed || d.closures[0].RunnerID != "local-interpreter" ||
		d.closures[0].Label != "python" || d.closures[0].Reason != toolsession.ReasonRunEnd {
		t.Fatalf("teardown report: %+v", d.closures)
	}
}

// Scope call on a door that honours only call (MCP): every call is fresh,
// and the call's end stops its process runner session.
func TestToolOnTheProcessRunnerUnderCallScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDoor(toolsession.ScopeCall)
	tl := code.NewTool(local.New(local.Options{Commands: map[string]string{"python": realPython(t)}}),
		code.ToolOptions{Scope: toolsession.ScopeCall, Language: "bash"})
	if !strings.Contains(tl.Spec().Description, "Nothing persists") {
		t.Fatal(tl.Spec().Description)
	}
	res, err := d.call(ctx, tl, "c1", "", "", nil, "echo $((6*7)) > answer; cat answer")
	if err != nil || !strings.HasPrefix(res.Content, "42\n[artifact: answer, 3 bytes, file://") {
		t.Fatalf("%q %v", res.Content, err)
	}
	d.tier.FireCall(ctx, "c1")
	res, err = d.call(ctx, tl, "c2", "", "", nil, "cat answer")
	if err != nil || !res.IsError || !strings.Contains(res.Content, "No such file") || !strings.Contains(res.Content, "[exit 1]") {
		t.Fatalf("a new call saw the last call's files: %q %v", res.Content, err)
	}
	d.tier.FireCall(ctx, "c2")
}
