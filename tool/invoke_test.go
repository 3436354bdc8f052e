package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// door is a tool.Door that records its events and settles.
type door struct {
	mu      sync.Mutex
	events  []event.Event
	settled []string
}

func (d *door) of(asks bool) *tool.Door {
	return &tool.Door{Scopes: []toolsession.Scope{toolsession.ScopeCall}, Asks: asks,
		Meta: event.Meta{RunID: "r1", Tenant: "acme"},
		Report: func(e event.Event) {
			d.mu.Lock()
			d.events = append(d.events, e)
			d.mu.Unlock()
		},
		Settle: func(id string) {
			d.mu.Lock()
			d.settled = append(d.settled, id)
			d.mu.Unlock()
		},
		Register: func(toolsession.Origin, func(context.Context) error, toolsession.Options) toolsession.Outcome {
			return toolsession.Outcome{}
		}}
}

func (d *door) types() []event.Type {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ts []event.Type
	for _, e := range d.events {
		ts = append(ts, e.Type)
	}
	return ts
}

func (d *door) end() *tool.CallEnd {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.events {
		if p, ok := e.Payload.(*tool.CallEnd); ok {
			return p
		}
	}
	return nil
}

type fnTool struct {
	schema string
	fn     func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error)
}

func (f fnTool) Spec() tool.Spec {
	return tool.Spec{Name: "t", InputSchema: json.RawMessage(f.schema)}
}
func (f fnTool) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	return f.fn(ctx, c, args)
}

func request(t tool.Tool, args string) tool.Request {
	return tool.Request{Name: "t", Tool: t, ToolCallID: "r1:c1", RunID: "r1", Args: json.RawMessage(args),
		Identity: &tool.Identity{Tenant: "acme", Principal: "ann"}}
}

// Every way a call comes out, its class, what the model is told, and that
// a settled call's call scope is closed once and its end told.
func TestInvokeSortsEveryOutcome(t *testing.T) {
	t.Parallel()
	result := func(r tool.Result, err error) func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) {
		return func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) { return r, err }
	}
	for _, tc := range []struct {
		name, args, class, says string
		fn                      func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error)
		isError                 bool
	}{
		{name: "ok", args: `{}`, fn: result(tool.Result{Content: "fine"}, nil), says: "fine"},
		{name: "error result", args: `{}`, fn: result(tool.Result{Content: "no such file", IsError: true}, nil),
			class: tool.ClassToolError, says: "no such file", isError: true},
		{name: "error", args: `{}`, fn: result(tool.Result{}, errors.New("the disk is full")),
			class: tool.ClassToolError, says: "The tool t failed: the disk is full", isError: true},
		{name: "invalid arguments", args: `{"n":"x"}`, fn: result(tool.Result{Content: "ran"}, nil),
			class: tool.ClassInvalidArguments, says: `field "n"`, isError: true},
		{name: "argument error from the tool", args: `{}`, fn: result(tool.Result{}, &tool.ArgumentError{Tool: "t", Problem: "bad"}),
			class: tool.ClassInvalidArguments, says: "bad", isError: true},
		{name: "capacity", args: `{}`, fn: result(tool.Result{}, &toolsession.CapacityError{Tool: "t", MaxLive: 1}),
			class: tool.ClassCapacity, says: "could not open a session", isError: true},
		{name: "scope refused", args: `{}`, fn: result(tool.Result{}, &tool.ScopeError{Tool: "t", Scope: toolsession.ScopeRun}),
			class: tool.ClassDeclined, says: "cannot give", isError: true},
		{name: "panic", args: `{}`, fn: func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) { panic("secret value") },
			class: tool.ClassPanic, says: "panicked", isError: true},
		{name: "null arguments", args: `null`, fn: result(tool.Result{Content: "fine"}, nil), says: "fine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &door{}
			ft := fnTool{schema: `{"type":"object","properties":{"n":{"type":"integer"}}}`, fn: tc.fn}
			v, err := tool.NewValidator("t", json.RawMessage(ft.schema))
			if err != nil {
				t.Fatal(err)
			}
			req := request(ft, tc.args)
			req.Valid = v
			out := tool.Invoke(context.Background(), d.of(true), req)
			if out.Class != tc.class || out.Result.IsError != tc.isError || !strings.Contains(out.Result.Content, tc.says) {
				t.Fatalf("outcome %+v; want class %q, isError %v, saying %q", out, tc.class, tc.isError, tc.says)
			}
			if strings.Contains(out.Result.Content, "secret value") {
				t.Fatal("the panic value reached the result")
			}
			if !slices.Equal(d.settled, []string{"r1:c1"}) {
				t.Fatalf("settled %v, want the call once", d.settled)
			}
			end := d.end()
			if end == nil || end.ErrorClass != tc.class || end.IsError != tc.isError || end.ToolCallID != "r1:c1" {
				t.Fatalf("tool_end %+v", end)
			}
		})
	}
}

// A panic is a *toolsession.PanicError with the call's id and the stack,
// and a tool_panic event between the start and the end.
func TestInvokeRecoversAPanic(t *testing.T) {
	t.Parallel()
	d := &door{}
	boom := fnTool{fn: func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) { panic("index out of range") }}
	out := tool.Invoke(context.Background(), d.of(true), request(boom, `{}`))
	var pe *toolsession.PanicError
	if !errors.As(out.Err, &pe) || pe.ToolCallID != "r1:c1" || pe.Tool != "t" || pe.Cleanup || len(pe.Stack) == 0 || pe.Value != "index out of range" {
		t.Fatalf("err %#v; want a *toolsession.PanicError with the call and the stack", out.Err)
	}
	if !strings.Contains(pe.Error(), "panicked in call r1:c1") {
		t.Fatalf("error text %q", pe.Error())
	}
	want := []event.Type{tool.TypeCallStart, tool.TypePanic, tool.TypeCallEnd}
	if got := d.types(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if e := d.events[1]; e.Meta.RunID != "r1" || e.Payload.(*tool.Panicked).Panic != "index out of range" {
		t.Fatalf("tool_panic %+v %+v", e.Meta, e.Payload)
	}
}

// A check-in from inside a call: a door that can ask gets the question
// and the call stays open (not settled, no end); a door that cannot
// answers the call as declined, and it settles.
func TestInvokeCheckIn(t *testing.T) {
	t.Parallel()
	asker := fnTool{fn: func(ctx context.Context, _ *tool.Call, _ json.RawMessage) (tool.Result, error) {
		if a, ok := tool.ApprovalFrom(ctx); ok {
			return tool.Result{Content: "approved: " + a.Note}, nil
		}
		return tool.Result{}, tool.CheckIn("drop the table?")
	}}
	d := &door{}
	out := tool.Invoke(context.Background(), d.of(true), request(asker, `{}`))
	if out.Asked != "drop the table?" || out.Result.IsError || len(d.settled) != 0 || d.end() != nil {
		t.Fatalf("asking door: %+v, settled %v, end %+v; want the question, the call left open", out, d.settled, d.end())
	}
	req := request(asker, `{}`)
	req.Approval = &tool.Approval{Note: "go"}
	if out := tool.Invoke(context.Background(), d.of(true), req); out.Result.Content != "approved: go" || len(d.settled) != 1 {
		t.Fatalf("approved: %+v, settled %v", out, d.settled)
	}
	d2 := &door{}
	out = tool.Invoke(context.Background(), d2.of(false), request(asker, `{}`))
	var ask *tool.CheckInRequest
	if out.Class != tool.ClassDeclined || !out.Result.IsError || !strings.Contains(out.Result.Content, "drop the table?") ||
		!errors.As(out.Err, &ask) || len(d2.settled) != 1 {
		t.Fatalf("door that cannot ask: %+v, settled %v", out, d2.settled)
	}
}

// A refused call does not run; it is told (start and end with its class)
// and its call scope settles. An unknown tool is answered by name.
func TestInvokeRefusedAndUnknown(t *testing.T) {
	t.Parallel()
	ran := false
	never := fnTool{fn: func(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) {
		ran = true
		return tool.Result{}, nil
	}}
	d := &door{}
	req := request(never, `{}`)
	req.Refused = &tool.Outcome{Result: tool.Result{Content: "declined", IsError: true}, Class: tool.ClassDeclined}
	out := tool.Invoke(context.Background(), d.of(true), req)
	if ran || out.Class != tool.ClassDeclined || len(d.settled) != 1 || d.end().ErrorClass != tool.ClassDeclined {
		t.Fatalf("refused: ran %v, %+v, settled %v", ran, out, d.settled)
	}
	req = request(nil, `{}`)
	req.Name = "nope"
	out = tool.Invoke(context.Background(), (&door{}).of(true), req)
	if out.Class != tool.ClassUnknownTool || !strings.Contains(out.Result.Content, `"nope"`) {
		t.Fatalf("unknown: %+v", out)
	}
}

// The tool is told the call's ids, a copy of the identity and of the
// door's scopes: what it changes, changes nothing for the door.
func TestInvokeToldTheCall(t *testing.T) {
	t.Parallel()
	var got *tool.Call
	spy := fnTool{fn: func(_ context.Context, c *tool.Call, _ json.RawMessage) (tool.Result, error) {
		got = c
		c.Identity.Tenant = "mallory"
		c.Scopes[0] = toolsession.ScopeShutdown
		return tool.Result{}, nil
	}}
	d := (&door{}).of(true)
	req := request(spy, `{}`)
	req.SessionID = "s1"
	tool.Invoke(context.Background(), d, req)
	if got.Tool != "t" || got.ToolCallID != "r1:c1" || got.RunID != "r1" || got.SessionID != "s1" {
		t.Fatalf("call %+v", got)
	}
	if req.Identity.Tenant != "acme" || d.Scopes[0] != toolsession.ScopeCall {
		t.Fatalf("the tool changed the door's identity (%+v) or scopes (%v)", req.Identity, d.Scopes)
	}
	if !got.Honours(toolsession.ScopeShutdown) || got.Honours(toolsession.ScopeRun) {
		t.Fatalf("the call's scopes %v", got.Scopes)
	}
}
