package code_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	tl := code.NewTool(&memRunner{}, code.ToolOptions{})
	spec := tl.Spec()
	if spec.Name != "run_code" {
		t.Fatalf("name %q, want run_code", spec.Name)
	}
	if !strings.Contains(spec.Description, "python") || !strings.Contains(spec.Description, "within this turn") ||
		!strings.Contains(spec.Description, "4000") {
		t.Fatalf("default description must name python, the run scope and the 4000-character cut:\n%s", spec.Description)
	}
	var schema map[string]any
	if err := json.Unmarshal(spec.InputSchema, &schema); err != nil || schema["type"] != "object" {
		t.Fatalf("input schema %s: %v", spec.InputSchema, err)
	}
}

func TestDescriptionSaysWhatPersistsByScope(t *testing.T) {
	t.Parallel()
	keeper := &memRunner{}
	tests := []struct {
		scope toolsession.Scope
		r     code.Runner
		want  string
	}{
		{toolsession.ScopeCall, keeper, "Nothing persists between calls"},
		{toolsession.ScopeRun, keeper, "State persists within this turn"},
		{toolsession.ScopeSession, keeper, "State persists across the conversation"},
		{toolsession.ScopeRun, processLike{keeper}, "variables do not persist; files written in the working directory persist within this turn"},
		{toolsession.ScopeSession, processLike{keeper}, "files written in the working directory persist across the conversation"},
	}
	for _, tc := range tests {
		d := code.NewTool(tc.r, code.ToolOptions{Scope: tc.scope, Description: "Analyse the sales data."}).Spec().Description
		if !strings.Contains(d, tc.want) {
			t.Errorf("scope %s: description lacks %q:\n%s", tc.scope, tc.want, d)
		}
		if !strings.HasPrefix(d, "Analyse the sales data.") {
			t.Errorf("scope %s: the operator's description must come first:\n%s", tc.scope, d)
		}
		if !strings.Contains(d, "Compute over data rather than asking for it") {
			t.Errorf("scope %s: description lacks the compute-over-data advice:\n%s", tc.scope, d)
		}
	}
	withInputs := code.NewTool(keeper, code.ToolOptions{Inputs: func(context.Context, *tool.Call) ([]code.Input, error) { return nil, nil }})
	if !strings.Contains(withInputs.Spec().Description, code.InputsEnv) {
		t.Errorf("a tool with inputs must tell the model about %s", code.InputsEnv)
	}
}

// processLike is a runner that says it keeps only files.
type processLike struct{ code.Runner }

func (processLike) KeepsState() bool { return false }

func TestRefusalsComeBeforeAnyStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		scope     toolsession.Scope
		door      *door
		runID     string
		sessionID string
		wantFix   string
		wantErr   func(*testing.T, error)
	}{
		{
			name: "door does not honour the scope", scope: toolsession.ScopeRun,
			door: newDoor(toolsession.ScopeCall), runID: "",
			wantFix: "scope this door honours (call)",
			wantErr: func(t *testing.T, err error) { mustErrorAs[*tool.ScopeError](t, err) },
		},
		{
			name: "door honours nothing", scope: toolsession.ScopeCall,
			door: &door{tier: toolsession.NewTier(toolsession.Config{})}, runID: "r1",
			wantFix: "door that honours teardown scopes",
		},
		{
			name: "session scope without a session id", scope: toolsession.ScopeSession,
			door: newDoor(allScopes()...), runID: "r1",
			wantFix: "pass a session id), or configure the tool with scope run",
			wantErr: func(t *testing.T, err error) { mustErrorAs[*tool.MissingFactError](t, err) },
		},
		{
			name: "run scope without a run id", scope: toolsession.ScopeRun,
			door: newDoor(allScopes()...), runID: "",
			wantFix: "configure the tool with scope call",
			wantErr: func(t *testing.T, err error) { mustErrorAs[*tool.MissingFactError](t, err) },
		},
		{
			name: "shutdown cannot key a session", scope: toolsession.ScopeShutdown,
			door: newDoor(allScopes()...), runID: "r1",
			wantFix: "configure the tool with scope call, run or session",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &memRunner{}
			tl := code.NewTool(r, code.ToolOptions{Scope: tc.scope})
			var c *tool.Call
			if tc.door.scopes == nil && tc.name == "door honours nothing" {
				c = tool.NewCall("run_code", "c1", tc.runID, tc.sessionID, nil, []toolsession.Scope{toolsession.ScopeCall}, nil)
			} else {
				c = tool.NewCall("run_code", "c1", tc.runID, tc.sessionID, nil, tc.door.scopes, tc.door.register)
			}
			_, err := tl.Call(ctx, c, json.RawMessage(`{"code":"print(1)"}`))
			ref := mustErrorAs[*code.RefusalError](t, err)
			if ref.Scope != tc.scope || !strings.Contains(err.Error(), tc.wantFix) {
				t.Fatalf("refusal %q must name scope %s and the fix %q", err, tc.scope, tc.wantFix)
			}
			if tc.wantErr != nil {
				tc.wantErr(t, err)
			}
			if r.startCount() != 0 {
				t.Fatalf("a refused call started %d session(s)", r.startCount())
			}
			if len(tc.door.registrations()) != 0 {
				t.Fatal("a refused call registered a teardown")
			}
		})
	}
}

func TestArgumentsAreValidated(t *testing.T) {
	t.Parallel()
	r := &memRunner{}
	tl := code.NewTool(r, code.ToolOptions{})
	d := newDoor(allScopes()...)
	for _, args := range []string{`{}`, `{"code":""}`, `{"code":1}`, `{"code":"x","extra":1}`, `[`} {
		c := tool.NewCall("run_code", "c1", "r1", "", nil, d.scopes, d.register)
		_, err := tl.Call(context.Background(), c, json.RawMessage(args))
		mustErrorAs[*tool.ArgumentError](t, err)
	}
	if r.startCount() != 0 {
		t.Fatal("invalid arguments started a session")
	}
}

func TestOneSessionPerKeyAndEveryCallTouches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{}
	d := newDoor(allScopes()...)
	tl := code.NewTool(r, code.ToolOptions{Language: "python"})
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	bob := &tool.Identity{Tenant: "acme", Principal: "bob"}

	res1, err := d.call(ctx, tl, "c1", "run-1", "", alice, "a")
	if err != nil {
		t.Fatal(err)
	}
	res2, err := d.call(ctx, tl, "c2", "run-1", "", alice, "b")
	if err != nil {
		t.Fatal(err)
	}
	if r.startCount() != 1 || res1.Content != "mem-1:a" || res2.Content != "mem-1:b" {
		t.Fatalf("two calls in one run: %d starts, %q, %q; want one session", r.startCount(), res1.Content, res2.Content)
	}
	// Another principal with the same run id is another key.
	res3, err := d.call(ctx, tl, "c3", "run-1", "", bob, "c")
	if err != nil || res3.Content != "mem-2:c" {
		t.Fatalf("another principal reached %q (%v); keys must separate principals", res3.Content, err)
	}
	regs := d.registrations()
	if len(regs) != 3 {
		t.Fatalf("%d registrations, want one per call", len(regs))
	}
	key, _ := toolsession.Key(toolsession.ScopeRun, toolsession.Facts{RunID: "run-1", Tenant: "acme", Principal: "alice"})
	want := toolsession.Options{Scope: toolsession.ScopeRun, Key: key, RunnerID: "mem", Label: "python"}
	if regs[0].opt != want || regs[1].opt != want {
		t.Fatalf("registered %+v and %+v, want %+v", regs[0].opt, regs[1].opt, want)
	}
	if regs[0].out.Reused || !regs[1].out.Reused || regs[1].out.Calls != 2 {
		t.Fatalf("the second call must touch the first registration: %+v then %+v", regs[0].out, regs[1].out)
	}
	if d.tier.Live() != 2 {
		t.Fatalf("tier holds %d registrations, want 2 (one per key)", d.tier.Live())
	}
	d.tier.FireShutdown(ctx)
}

func TestCleanupRemovesThenStops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := &memRunner{}
		d := newDoor(allScopes()...)
		tl := code.NewTool(r, code.ToolOptions{})
		if _, err := d.call(ctx, tl, "c1", "run-1", "", nil, "a"); err != nil {
			t.Fatal(err)
		}
		first := r.sessions[0]
		first.stopGate = make(chan struct{})

		fired := make(chan int)
		go func() { fired <- d.tier.FireRun(ctx, "run-1") }()
		synctest.Wait() // the cleanup is inside Stop, held by the gate
		if !first.isStopped() {
			t.Fatal("run end did not stop the session")
		}
		// While the old session is still stopping, a call under the same
		// key must already get a new one: it was removed before Stop.
		res, err := d.call(ctx, tl, "c2", "run-1", "", nil, "b")
		if err != nil || res.Content != "mem-2:b" {
			t.Fatalf("call during the stop reached %q (%v), want a fresh session", res.Content, err)
		}
		close(first.stopGate)
		if n := <-fired; n != 1 {
			t.Fatalf("FireRun closed %d, want 1", n)
		}
		d.tier.FireShutdown(ctx)
		if !r.sessions[1].isStopped() {
			t.Fatal("shutdown did not stop the second session")
		}
	})
}

func TestConcurrentFirstCallsOpenOneSession(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := &memRunner{gate: make(chan struct{})}
		d := newDoor(allScopes()...)
		tl := code.NewTool(r, code.ToolOptions{})
		const n = 8
		results := make([]tool.Result, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i], errs[i] = d.call(ctx, tl, "c"+string(rune('a'+i)), "run-1", "", nil, "x")
			})
		}
		synctest.Wait() // every caller is in Start or waiting for it
		if got := r.startCount(); got != 1 {
			t.Fatalf("%d concurrent first calls started %d sessions, want 1", n, got)
		}
		close(r.gate)
		wg.Wait()
		for i := range n {
			if errs[i] != nil || results[i].Content != "mem-1:x" {
				t.Fatalf("caller %d: %q, %v", i, results[i].Content, errs[i])
			}
		}
		regs := d.registrations()
		if len(regs) != n || regs[0].out.Reused || regs[n-1].out.Calls != n {
			t.Fatalf("want %d registrations folding into one: %+v", n, regs)
		}
		d.tier.FireShutdown(ctx)
	})
}

func TestFailedStartReachesEveryWaiterAndIsNotCached(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		boom := errors.New("sandbox quota exceeded")
		r := &memRunner{gate: make(chan struct{}), failing: boom}
		d := newDoor(allScopes()...)
		tl := code.NewTool(r, code.ToolOptions{})
		const n = 5
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = d.call(ctx, tl, "c", "run-1", "", nil, "x") })
		}
		synctest.Wait()
		close(r.gate)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, boom) {
				t.Fatalf("waiter %d got %v, want the start's failure", i, err)
			}
		}
		if r.startCount() != 1 {
			t.Fatalf("%d starts for one failed flight", r.startCount())
		}
		if len(d.registrations()) != 0 {
			t.Fatal("a failed start registered a teardown")
		}
		// Each waiter's call is reported, as a failure, to the door's stream.
		runs := d.codeRuns()
		if len(runs) != n {
			t.Fatalf("%d code_run events for %d failed calls", len(runs), n)
		}
		for _, p := range runs {
			if p.OK || p.Error == "" {
				t.Fatalf("a failed start reported as %+v", p)
			}
		}
		// Nothing was cached: the next call starts again, and succeeds.
		r.failing = nil
		r.gate = nil
		res, err := d.call(ctx, tl, "c2", "run-1", "", nil, "y")
		if err != nil || res.Content != "mem-2:y" || r.startCount() != 2 {
			t.Fatalf("after a failed start: %q, %v, %d starts", res.Content, err, r.startCount())
		}
		d.tier.FireShutdown(ctx)
	})
}

func TestAfterATimeoutTheNextCallOpensANewSessionAndSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{}
	d := newDoor(allScopes()...)
	tl := code.NewTool(r, code.ToolOptions{Events: d.emit})

	res, err := d.call(ctx, tl, "c1", "run-1", "", nil, "hang")
	if err != nil {
		t.Fatalf("a timeout is a result for the model, not a tool error: %v", err)
	}
	if !res.IsError || !strings.HasPrefix(res.Content, "partial") || !strings.Contains(res.Content, "[timed out") ||
		!strings.Contains(res.Content, "state is lost") || strings.Contains(res.Content, "[exit") {
		t.Fatalf("timeout rendering:\n%s", res.Content)
	}
	if !r.sessions[0].isStopped() {
		t.Fatal("the timed-out session was kept for the next call")
	}
	res, err = d.call(ctx, tl, "c2", "run-1", "", nil, "print(x)")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Content, "[new session:") || !strings.Contains(res.Content, "mem-2:print(x)") {
		t.Fatalf("the call after a timeout must run on a new session and say the old one was lost:\n%s", res.Content)
	}
	if r.execCount() != 2 {
		t.Fatalf("%d executions for two calls; the tool ran code on its own", r.execCount())
	}
	runs := d.codeRuns()
	if len(runs) != 2 || runs[0].OK || runs[0].Error == "" || !runs[1].OK {
		t.Fatalf("code_run events: %+v %+v", runs[0], runs[1])
	}
	res, err = d.call(ctx, tl, "c3", "run-1", "", nil, "print(y)")
	if err != nil || strings.Contains(res.Content, "[new session") || res.Content != "mem-2:print(y)" {
		t.Fatalf("the note is said once, then the new session is reused: %q, %v", res.Content, err)
	}
	// The new session lives under the same registration: one teardown
	// closes it.
	if d.tier.Live() != 1 {
		t.Fatalf("%d live registrations", d.tier.Live())
	}
	d.tier.FireRun(ctx, "run-1")
	if !r.sessions[1].isStopped() {
		t.Fatal("run end did not stop the new session")
	}
}

func TestRenderingOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exit := 2
	r := &memRunner{result: func(string) (code.Result, error) {
		return code.Result{OK: false, Stdout: "rows: 3", Stderr: "KeyError: 'total'", ExitCode: &exit,
			Artifacts: []code.Artifact{{Name: "out.csv", Bytes: 120, URI: "file:///work/out.csv"}, {Name: "plot.png", Bytes: 9}}}, nil
	}}
	d := newDoor(allScopes()...)
	tl := code.NewTool(r, code.ToolOptions{Inputs: func(context.Context, *tool.Call) ([]code.Input, error) {
		return []code.Input{{Name: "sales.csv", Data: []byte("a,b\n")}}, nil
	}})
	res, err := d.call(ctx, tl, "c1", "run-1", "", nil, "x")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"[inputs staged: 1 file(s); the environment variable AGENTRY_INPUTS maps each name to its path (a JSON object):\n  sales.csv → /work/inputs/sales.csv (4 bytes)]",
		"rows: 3",
		"stderr:\nKeyError: 'total'",
		"[exit 2] the code failed: read stderr above, fix the code and run it again.",
		"[artifact: out.csv, 120 bytes, file:///work/out.csv]",
		"[artifact: plot.png, 9 bytes]",
	}, "\n")
	if res.Content != want || !res.IsError {
		t.Fatalf("rendered:\n%s\nwant:\n%s", res.Content, want)
	}
	// The staging note belongs to the call that staged.
	res, _ = d.call(ctx, tl, "c2", "run-1", "", nil, "x")
	if strings.Contains(res.Content, "inputs staged") {
		t.Fatalf("a reused session repeated the staging note:\n%s", res.Content)
	}
	d.tier.FireShutdown(ctx)
}

func TestNothingPrinted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	zero := 0
	r := &memRunner{result: func(string) (code.Result, error) { return code.Result{OK: true, ExitCode: &zero}, nil }}
	d := newDoor(allScopes()...)
	res, err := d.call(ctx, code.NewTool(r, code.ToolOptions{}), "c1", "run-1", "", nil, "x = 1")
	if err != nil || !strings.Contains(res.Content, "printed nothing") || res.IsError {
		t.Fatalf("%q, %v", res.Content, err)
	}
	d.tier.FireShutdown(ctx)
}

func manyArtifacts(n int) []code.Artifact {
	out := make([]code.Artifact, n)
	for i := range out {
		out[i] = code.Artifact{Name: fmt.Sprintf("f%03d.csv", i), Bytes: 1}
	}
	return out
}

func TestCutsAreStated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	zero := 0
	tests := []struct {
		name   string
		result code.Result
		want   []string
		not    []string
	}{
		{
			name:   "the tool cuts",
			result: code.Result{OK: true, ExitCode: &zero, Stdout: strings.Repeat("é", 25)},
			want:   []string{strings.Repeat("é", 10) + "\n[truncated: showing 10 of 25 characters of stdout", "summary, a slice", "aggregate"},
		},
		{
			name: "only the runner cut",
			result: code.Result{OK: true, ExitCode: &zero, Stdout: "12345",
				Truncated: &code.Truncation{Stdout: true, OfChars: 90000}},
			want: []string{"12345\n[truncated: showing 5 of 90000 characters of stdout"},
		},
		{
			name: "both cut stderr",
			result: code.Result{OK: true, ExitCode: &zero, Stderr: strings.Repeat("w", 30),
				Truncated: &code.Truncation{Stderr: true, OfChars: 500}},
			want: []string{"stderr:\n" + strings.Repeat("w", 10) + "\n[truncated: showing 10 of 500 characters of stderr"},
		},
		{
			name: "the tool cuts the artifact list",
			result: code.Result{OK: true, ExitCode: &zero, Stdout: "ok",
				Artifacts: manyArtifacts(60)},
			want: []string{"[artifact: f049.csv, 1 bytes]\n[artifacts cut: showing 50 of 60 files", "list, count or filter"},
		},
		{
			name: "only the runner cut the artifact list",
			result: code.Result{OK: true, ExitCode: &zero, Stdout: "ok", Artifacts: manyArtifacts(50),
				Truncated: &code.Truncation{Artifacts: true, OfArtifacts: 73}},
			want: []string{"[artifacts cut: showing 50 of 73 files"},
		},
		{
			name: "the runner cut the list and did not count",
			result: code.Result{OK: true, ExitCode: &zero, Stdout: "ok", Artifacts: manyArtifacts(3),
				Truncated: &code.Truncation{Artifacts: true}},
			want: []string{"[artifacts cut: showing 3 of more than 3 files"},
		},
		{
			name:   "no cut, no marker",
			result: code.Result{OK: true, ExitCode: &zero, Stdout: strings.Repeat("a", 10)},
			not:    []string{"truncated"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &memRunner{result: func(string) (code.Result, error) { return tc.result, nil }}
			d := newDoor(allScopes()...)
			tl := code.NewTool(r, code.ToolOptions{MaxOutputChars: 10, Events: d.emit})
			res, err := d.call(ctx, tl, "c1", "run-1", "", nil, "x")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Content, w) {
					t.Fatalf("content lacks %q:\n%s", w, res.Content)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(res.Content, w) {
					t.Fatalf("content has %q:\n%s", w, res.Content)
				}
			}
			runs := d.codeRuns()
			if len(runs) != 1 || runs[0].Truncated != (len(tc.not) == 0) {
				t.Fatalf("code_run.truncated must be the real flag: %+v", runs)
			}
			d.tier.FireShutdown(ctx)
		})
	}
}

func TestCodeRunEventCarriesFactsNeverCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{}
	d := newDoor(allScopes()...)
	tl := code.NewTool(r, code.ToolOptions{Name: "analyse", Language: "python", Events: d.emit,
		Inputs: func(context.Context, *tool.Call) ([]code.Input, error) {
			return []code.Input{{Name: "a", Data: []byte("1")}, {Name: "b", Data: []byte("2")}}, nil
		}})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	secret := `total = sum(r["amount"] for r in rows if r["customer"] == "ACME-SECRET-4471")`
	if _, err := d.call(ctx, tl, "c1", "run-9", "conv-3", id, secret); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	ev := d.events[0]
	d.mu.Unlock()
	if ev.Type != code.TypeRun || ev.Meta.RunID != "run-9" || ev.Meta.SessionID != "conv-3" ||
		ev.Meta.Tenant != "acme" || ev.Meta.Principal != "alice" {
		t.Fatalf("event envelope: %+v", ev)
	}
	p := ev.Payload.(*code.RunReport)
	if p.Tool != "analyse" || p.RunnerID != "mem" || p.Language != "python" || !p.OK || p.StagedInputs != 2 ||
		p.ShapeHash != code.ShapeHash("python", secret) || p.OutputChars == 0 || p.ExitCode == nil {
		t.Fatalf("payload: %+v", p)
	}
	raw, _ := json.Marshal(ev)
	for _, leak := range []string{"ACME-SECRET", "amount", "customer", "sum(", secret} {
		if strings.Contains(string(raw), leak) {
			t.Fatalf("the event carries the code (%q): %s", leak, raw)
		}
	}
	d.tier.FireShutdown(ctx)
}

// Without a ToolOptions.Events hook, code_run goes to the door's stream
// through tool.Call.Emit, once per call.
func TestCodeRunEventGoesToTheDoorByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDoor(allScopes()...)
	tl := code.NewTool(&memRunner{}, code.ToolOptions{})
	if _, err := d.call(ctx, tl, "c1", "run-1", "", nil, "print(1)"); err != nil {
		t.Fatal(err)
	}
	runs := d.codeRuns()
	if len(runs) != 1 || runs[0].Tool != "run_code" {
		t.Fatalf("code_run events = %+v, want one from run_code", runs)
	}
	d.mu.Lock()
	m := d.events[0].Meta
	d.mu.Unlock()
	if m.RunID != "run-1" || m.Tenant != "" {
		t.Fatalf("meta = %+v", m)
	}
	d.tier.FireShutdown(ctx)
}

func TestInputsOnARunnerThatCannotStageAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{noStage: true}
	d := newDoor(allScopes()...)
	tl := code.NewTool(r, code.ToolOptions{Inputs: func(context.Context, *tool.Call) ([]code.Input, error) {
		return []code.Input{{Name: "rows.json", Data: []byte("[]")}}, nil
	}})
	_, err := d.call(ctx, tl, "c1", "run-1", "", nil, "x")
	ns := mustErrorAs[*code.NoStagingError](t, err)
	if ns.RunnerID != "mem" || !strings.Contains(err.Error(), "drop ToolOptions.Inputs") {
		t.Fatalf("refusal must name the runner and the fix: %v", err)
	}
	if !r.sessions[0].isStopped() {
		t.Fatal("the session that could not stage was left running")
	}
	if len(d.registrations()) != 0 {
		t.Fatal("a refused session registered a teardown")
	}
}

func TestCallScopeIsFreshEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{}
	d := newDoor(toolsession.ScopeCall) // an MCP-like door
	tl := code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeCall})
	for _, id := range []string{"c1", "c2"} {
		if _, err := d.call(ctx, tl, id, "", "", nil, "x"); err != nil {
			t.Fatal(err)
		}
		if n := d.tier.FireCall(ctx, id); n != 1 {
			t.Fatalf("call end closed %d sessions", n)
		}
	}
	if r.startCount() != 2 || !r.sessions[0].isStopped() || !r.sessions[1].isStopped() {
		t.Fatalf("call scope: %d starts", r.startCount())
	}
}
