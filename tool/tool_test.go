package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var allScopes = []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown}

type registration struct {
	origin toolsession.Origin
	opt    toolsession.Options
}

func recording(regs *[]registration) func(toolsession.Origin, func(context.Context) error, toolsession.Options) toolsession.Outcome {
	return func(o toolsession.Origin, _ func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
		*regs = append(*regs, registration{o, opt})
		return toolsession.Outcome{KeyHash: toolsession.HashKey(opt.Key), Calls: 1}
	}
}

func TestOnTeardownRefusesScopesTheDoorDoesNotHonour(t *testing.T) {
	t.Parallel()
	var regs []registration
	mcp := tool.NewCall("run_code", "c1", "", "", nil, []toolsession.Scope{toolsession.ScopeCall}, recording(&regs))
	for _, s := range []toolsession.Scope{toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown, ""} {
		_, err := mcp.OnTeardown(func(context.Context) error { return nil }, toolsession.Options{Scope: s})
		var se *tool.ScopeError
		if !errors.As(err, &se) {
			t.Fatalf("scope %q: err = %v, want *ScopeError", s, err)
		}
		want := s
		if want == "" {
			want = toolsession.ScopeRun // zero scope means run
		}
		msg := err.Error()
		if !strings.Contains(msg, string(want)) || !strings.Contains(msg, "[call]") || !strings.Contains(msg, "run_code") {
			t.Fatalf("scope %q: message %q must name the tool, the scope and what the door honours", s, msg)
		}
	}
	if len(regs) != 0 {
		t.Fatal("a refused scope reached the registrar")
	}
	out, err := mcp.OnTeardown(func(context.Context) error { return nil }, toolsession.Options{Scope: toolsession.ScopeCall})
	if err != nil || len(regs) != 1 || regs[0].opt.Key != "c=c1" || out.KeyHash != toolsession.HashKey("c=c1") {
		t.Fatalf("call scope: %v, %+v", err, regs)
	}

	none := tool.NewCall("t", "c", "r", "s", nil, nil, nil)
	if _, err := none.OnTeardown(nil, toolsession.Options{Scope: toolsession.ScopeCall}); err == nil || !strings.Contains(err.Error(), "no teardown scopes") {
		t.Fatalf("door without a registrar: %v", err)
	}
}

func TestOnTeardownDerivesKeysAndNeverWidens(t *testing.T) {
	t.Parallel()
	id := &tool.Identity{Tenant: "acme", Principal: "bob", ConversationID: "conv-9"}
	tests := []struct {
		name    string
		call    *tool.Call
		scope   toolsession.Scope
		wantKey string
		wantErr string
	}{
		{"run", tool.NewCall("t", "c", "r1", "s1", id, allScopes, nil), toolsession.ScopeRun, "t=acme/p=bob/r=r1", ""},
		{"session", tool.NewCall("t", "c", "r1", "s1", id, allScopes, nil), toolsession.ScopeSession, "t=acme/p=bob/s=s1", ""},
		{"no identity spells absent", tool.NewCall("t", "c", "r1", "", nil, allScopes, nil), toolsession.ScopeRun, "t=_/p=_/r=r1", ""},
		{"session without session id", tool.NewCall("t", "c", "r1", "", id, allScopes, nil), toolsession.ScopeSession, "", "session id"},
		{"run without run id", tool.NewCall("t", "c", "", "s1", id, allScopes, nil), toolsession.ScopeRun, "", "run id"},
		{"shutdown keeps an empty key", tool.NewCall("t", "c", "r1", "s1", id, allScopes, nil), toolsession.ScopeShutdown, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var regs []registration
			c := tool.NewCall(tc.call.Tool, tc.call.ToolCallID, tc.call.RunID, tc.call.SessionID, tc.call.Identity, tc.call.Scopes, recording(&regs))
			_, err := c.OnTeardown(nil, toolsession.Options{Scope: tc.scope, RunnerID: "local"})
			if tc.wantErr != "" {
				var mf *tool.MissingFactError
				if !errors.As(err, &mf) || !strings.Contains(err.Error(), tc.wantErr) || len(regs) != 0 {
					t.Fatalf("err = %v, regs %+v; want a refusal naming %q", err, regs, tc.wantErr)
				}
				return
			}
			if err != nil || len(regs) != 1 {
				t.Fatalf("err = %v, regs = %+v", err, regs)
			}
			r := regs[0]
			if r.opt.Key != tc.wantKey || r.opt.Scope != tc.scope || r.opt.RunnerID != "local" {
				t.Fatalf("registered %+v, want key %q", r.opt, tc.wantKey)
			}
			wantOrigin := toolsession.Origin{Tool: "t", ToolCallID: "c", RunID: c.RunID, SessionID: c.SessionID}
			if c.Identity != nil { // the caller's identity, and never one made up
				wantOrigin.Tenant, wantOrigin.Principal = c.Identity.Tenant, c.Identity.Principal
			}
			if r.origin != wantOrigin {
				t.Fatalf("origin = %+v, want %+v", r.origin, wantOrigin)
			}
		})
	}
}

func TestOnTeardownKeepsAnExplicitKey(t *testing.T) {
	t.Parallel()
	var regs []registration
	c := tool.NewCall("t", "c", "", "", nil, allScopes, recording(&regs))
	if _, err := c.OnTeardown(nil, toolsession.Options{Scope: toolsession.ScopeSession, Key: "mine"}); err != nil {
		t.Fatal(err)
	}
	if regs[0].opt.Key != "mine" {
		t.Fatalf("key = %q", regs[0].opt.Key)
	}
}

func TestFactsComeFromIdentityOnly(t *testing.T) {
	t.Parallel()
	c := tool.NewCall("t", "c", "r", "s", &tool.Identity{Tenant: "a", Principal: "b", ConversationID: "conv"}, nil, nil)
	if f := c.Facts(); f != (toolsession.Facts{ToolCallID: "c", RunID: "r", SessionID: "s", Tenant: "a", Principal: "b"}) {
		t.Fatalf("Facts = %+v", f)
	}
	if f := tool.NewCall("t", "c", "r", "s", nil, nil, nil).Facts(); f.Tenant != "" || f.Principal != "" {
		t.Fatalf("identity synthesised: %+v", f)
	}
	if _, err := c.Key("bogus"); err == nil {
		t.Fatal("unknown scope accepted")
	}
}

type sumIn struct {
	A     int      `json:"a" jsonschema:"the first addend"`
	B     int      `json:"b"`
	Note  string   `json:"note,omitempty"`
	Items []string `json:"items,omitempty"`
}

type sumOut struct {
	Sum int `json:"sum"`
}

func TestFuncDerivesSchemaAndValidates(t *testing.T) {
	t.Parallel()
	var got *tool.Call
	sum := tool.Func("sum", "adds", func(_ context.Context, c *tool.Call, in sumIn) (sumOut, error) {
		got = c
		return sumOut{in.A + in.B}, nil
	})
	spec := sum.Spec()
	if spec.Name != "sum" || spec.Description != "adds" || spec.CheckIn {
		t.Fatalf("spec = %+v", spec)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(spec.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || strings.Join(schema.Required, ",") != "a,b" || len(schema.Properties) != 4 ||
		!strings.Contains(string(schema.Properties["a"]), "the first addend") {
		t.Fatalf("schema = %s", spec.InputSchema)
	}

	call := tool.NewCall("sum", "c1", "r1", "", nil, nil, nil)
	res, err := sum.Call(context.Background(), call, json.RawMessage(`{"a":2,"b":40}`))
	if err != nil || res.Content != `{"sum":42}` || res.IsError || got != call {
		t.Fatalf("Call = %+v, %v", res, err)
	}

	bad := []struct{ args, field, problem string }{
		{`{"a":1}`, "b", "required"},
		{`{"a":"x","b":1}`, "a", "integer"},
		{`{"a":1,"b":2,"c":3}`, "c", "not a known argument"},
		{`{"a":1,"b":2,"items":[1]}`, "items.[]", "string"},
		{`{"a":1.5,"b":2}`, "a", "integer"},
		{`[1,2]`, "", "must be a JSON object"},
		{`{"a":`, "", "not valid JSON"},
		{`{"a":1,"b":2} {}`, "", "more than one"},
		{``, "a", "required"},
	}
	for _, b := range bad {
		_, err := sum.Call(context.Background(), call, json.RawMessage(b.args))
		var ae *tool.ArgumentError
		if !errors.As(err, &ae) || ae.Field != b.field || !strings.Contains(ae.Problem, b.problem) || ae.Tool != "sum" {
			t.Errorf("args %s: err = %v (%+v), want field %q about %q", b.args, err, ae, b.field, b.problem)
		}
		if !tool.IsArgumentError(err) {
			t.Errorf("IsArgumentError(%v) = false", err)
		}
	}
}

func TestFuncRendersOutputs(t *testing.T) {
	t.Parallel()
	type none struct{}
	call := tool.NewCall("x", "c", "", "", nil, nil, nil)
	str := tool.Func("s", "", func(context.Context, *tool.Call, none) (string, error) { return "plain", nil })
	res := tool.Func("r", "", func(context.Context, *tool.Call, none) (tool.Result, error) {
		return tool.Result{Content: "nope", IsError: true}, nil
	})
	boom := errors.New("backend down")
	fails := tool.Func("f", "", func(context.Context, *tool.Call, none) (int, error) { return 0, boom })
	if r, _ := str.Call(context.Background(), call, nil); r.Content != "plain" {
		t.Errorf("string out = %+v", r)
	}
	if r, _ := res.Call(context.Background(), call, nil); r.Content != "nope" || !r.IsError {
		t.Errorf("Result out = %+v", r)
	}
	if _, err := fails.Call(context.Background(), call, json.RawMessage(`{}`)); !errors.Is(err, boom) {
		t.Errorf("error out = %v", err)
	}
}

func TestFuncPanicsOnTypesWithoutSchema(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func(){
		"channel": func() {
			tool.Func("c", "", func(context.Context, *tool.Call, chan int) (string, error) { return "", nil })
		},
		"not object": func() {
			tool.Func("s", "", func(context.Context, *tool.Call, string) (string, error) { return "", nil })
		},
	} {
		func() {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(v.(string), "tool.Func") {
					t.Errorf("%s: recovered %v, want a tool.Func panic", name, v)
				}
			}()
			build()
		}()
	}
}

func TestWithCheckIn(t *testing.T) {
	t.Parallel()
	type none struct{}
	base := tool.Func("rm", "deletes", func(context.Context, *tool.Call, none) (string, error) { return "ok", nil })
	ci := tool.WithCheckIn(base)
	if !ci.Spec().CheckIn || ci.Spec().Name != "rm" || base.Spec().CheckIn {
		t.Fatal("WithCheckIn must set CheckIn on the wrapper only")
	}
	if r, err := ci.Call(context.Background(), tool.NewCall("rm", "c", "", "", nil, nil, nil), nil); err != nil || r.Content != "ok" {
		t.Fatalf("wrapped call = %+v, %v", r, err)
	}
}

func TestValidatorRefusesBadSchemas(t *testing.T) {
	t.Parallel()
	if _, err := tool.NewValidator("x", json.RawMessage(`{"type":`)); err == nil {
		t.Error("broken schema accepted")
	}
	v, err := tool.NewValidator("x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(json.RawMessage(`{"anything":[1,2]}`)); err != nil {
		t.Errorf("empty schema refused an object: %v", err)
	}
	if err := v.Validate(json.RawMessage(`"str"`)); err == nil {
		t.Error("empty schema accepted a string")
	}
}

// FuzzValidate checks that no argument text makes validation panic, and
// that every refusal is an *ArgumentError.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":2}`, `{"a":"x"}`, `[1]`, `null`, `{"a":1e400,"b":1}`, `{"items":[1,{"x":2}]}`, "{\"a\":\"\xff\"}", `{"a":1,"b":2}{}`} {
		f.Add([]byte(s))
	}
	sum := tool.Func("sum", "", func(_ context.Context, _ *tool.Call, in sumIn) (int, error) { return in.A + in.B, nil })
	f.Fuzz(func(t *testing.T, args []byte) {
		_, err := sum.Call(context.Background(), tool.NewCall("sum", "c", "", "", nil, nil, nil), args)
		if err != nil && !tool.IsArgumentError(err) {
			t.Fatalf("refusal is not an ArgumentError: %v", err)
		}
	})
}

func TestHoldPinsThroughTheDoorsTierWithOnTeardownsRefusals(t *testing.T) {
	t.Parallel()
	tier := toolsession.NewTier(toolsession.Config{MaxLive: 1, Wait: -1})
	var held []toolsession.Options
	holder := func(ctx context.Context, o toolsession.Origin, opt toolsession.Options) (*toolsession.Lease, error) {
		held = append(held, opt)
		return tier.Hold(ctx, o, opt)
	}
	id := &tool.Identity{Tenant: "acme", Principal: "bob"}
	c := tool.NewCall("run_code", "c1", "run-1", "", id, allScopes, tier.Register).WithHolder(holder)

	if _, err := c.Hold(context.Background(), toolsession.Options{Scope: toolsession.ScopeSession}); err == nil ||
		!strings.Contains(err.Error(), "session id") {
		t.Fatalf("Hold for scope session without a session id = %v; want OnTeardown's refusal", err)
	}
	l, err := c.Hold(context.Background(), toolsession.Options{})
	if err != nil || l == nil || !l.Fresh {
		t.Fatalf("Hold = %+v, %v; want a fresh reservation", l, err)
	}
	want, _ := toolsession.Key(toolsession.ScopeRun, c.Facts())
	if len(held) != 1 || held[0].Key != want || held[0].Scope != toolsession.ScopeRun {
		t.Fatalf("holder saw %+v; want the run key derived from the call", held)
	}
	other := tool.NewCall("run_code", "c2", "run-2", "", id, allScopes, tier.Register).WithHolder(holder)
	if _, err := other.Hold(context.Background(), toolsession.Options{}); !errors.Is(err, toolsession.ErrCapacity) {
		t.Fatalf("a second session past MaxLive 1 = %v; want ErrCapacity", err)
	}
	l.Release()

	mcp := tool.NewCall("run_code", "c3", "", "", nil, []toolsession.Scope{toolsession.ScopeCall}, tier.Register).WithHolder(holder)
	var se *tool.ScopeError
	if _, err := mcp.Hold(context.Background(), toolsession.Options{Scope: toolsession.ScopeRun}); !errors.As(err, &se) {
		t.Fatalf("Hold for a scope the door does not honour = %v; want *tool.ScopeError", err)
	}
	plain := tool.NewCall("run_code", "c4", "run-4", "", nil, allScopes, tier.Register)
	if l, err := plain.Hold(context.Background(), toolsession.Options{}); l != nil || err != nil {
		t.Fatalf("Hold on a door without a holder = %v, %v; want a nil lease (holds nothing) and no error", l, err)
	}
	tier.FireShutdown(context.Background())
}
