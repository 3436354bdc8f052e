package tool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestSessionEvent(t *testing.T) {
	t.Parallel()
	o := toolsession.Origin{Tool: "run_code", ToolCallID: "c", RunID: "r", SessionID: "s"}
	opt := toolsession.Options{Key: "secret-key", RunnerID: "local", Label: "python"}
	e := tool.SessionEvent(o, opt, toolsession.Outcome{KeyHash: "abc", Calls: 1})
	p := e.Payload.(*tool.SessionOpened)
	if e.Type != tool.TypeSessionStarted || e.Meta.RunID != "r" || e.Meta.SessionID != "s" ||
		*p != (tool.SessionOpened{Tool: "run_code", Scope: "run", KeyHash: "abc", RunnerID: "local", Label: "python", Calls: 1}) {
		t.Fatalf("event = %+v %+v", e, p)
	}
	if e := tool.SessionEvent(o, opt, toolsession.Outcome{Reused: true, Calls: 2}); e.Type != tool.TypeSessionReused {
		t.Fatalf("reuse type = %s", e.Type)
	}
	if strings.Contains(fmt.Sprintf("%+v", *p), "secret-key") {
		t.Fatal("the raw key reached the payload")
	}
}

func TestCloseEvent(t *testing.T) {
	t.Parallel()
	ok := tool.CloseEvent(toolsession.Report{Tool: "t", Scope: toolsession.ScopeSession, KeyHash: "h", Reason: toolsession.ReasonIdle,
		RunID: "r-origin", SessionID: "s", Tenant: "acme", Principal: "bob", Held: 2 * time.Second, Took: 3 * time.Millisecond})
	p := ok.Payload.(*tool.SessionClosed)
	if ok.Type != tool.TypeSessionClosed || ok.Meta.RunID != "r-origin" || ok.Meta.Tenant != "acme" || ok.Meta.Principal != "bob" || p.HeldMs != 2000 || p.TookMs != 3 || p.Reason != "idle" || p.Error != "" {
		t.Fatalf("closed event = %+v %+v", ok, p)
	}
	cases := map[string]error{
		"timeout":   &toolsession.TimeoutError{Tool: "t", Timeout: time.Second},
		"panic":     &toolsession.PanicError{Tool: "t", Value: "x"},
		"cancelled": fmt.Errorf("abandoned: %w", context.Canceled),
		"error":     errors.New("boom"),
	}
	for class, err := range cases {
		e := tool.CloseEvent(toolsession.Report{Failed: true, Tool: "t", Err: err})
		p := e.Payload.(*tool.SessionClosed)
		if e.Type != tool.TypeSessionCloseFailed || p.ErrorClass != class || p.Error != err.Error() {
			t.Errorf("%s: %+v %+v", class, e, p)
		}
	}
	if tool.ErrorClass(nil) != "" {
		t.Error("nil error has a class")
	}
}

func TestCallEmitStampsTheDoorsMeta(t *testing.T) {
	t.Parallel()
	var got []event.Event
	id := &tool.Identity{Tenant: "acme", Principal: "bob"}
	c := tool.NewCall("run_code", "c1", "run-1", "s-1", id, nil, nil)
	c.Emit(event.Event{Type: code.TypeRun}) // no door stream: nothing happens, nothing panics
	c.WithEvents(func(e event.Event) { got = append(got, e) })
	c.Emit(event.Event{Type: code.TypeRun})
	c.Emit(event.Event{Type: code.TypeRun, Meta: event.Meta{RunID: "given", Tenant: "t2"}})
	if len(got) != 2 {
		t.Fatalf("got %d events, want 2", len(got))
	}
	if m := got[0].Meta; m.RunID != "run-1" || m.SessionID != "s-1" || m.Tenant != "acme" || m.Principal != "bob" {
		t.Fatalf("meta = %+v", m)
	}
	if m := got[1].Meta; m.RunID != "given" || m.Tenant != "t2" || m.Principal != "" {
		t.Fatalf("a tool's own meta was overwritten: %+v", m)
	}
	var anon []event.Event
	tool.NewCall("x", "c", "", "", nil, nil, nil).WithEvents(func(e event.Event) { anon = append(anon, e) }).Emit(event.Event{Type: code.TypeRun})
	if m := anon[0].Meta; m.Tenant != "" || m.Principal != "" || m.RunID != "" {
		t.Fatalf("identity or run invented: %+v", m)
	}
}

func TestCapacityEvent(t *testing.T) {
	t.Parallel()
	o := toolsession.Origin{Tool: "run_code", RunID: "r", Tenant: "acme", Principal: "bob"}
	opt := toolsession.Options{Scope: toolsession.ScopeSession, Key: "t=acme/p=bob/s=secret"}
	e, ok := tool.CapacityEvent(o, opt, nil, fmt.Errorf("wrapped: %w", &toolsession.CapacityError{Tool: "run_code", MaxLive: 2, Waited: 3 * time.Second}))
	p, _ := e.Payload.(*tool.SessionCapacity)
	if !ok || e.Type != tool.TypeSessionCapacity || p == nil || e.Meta.RunID != "r" || e.Meta.Principal != "bob" ||
		*p != (tool.SessionCapacity{Tool: "run_code", Scope: "session", KeyHash: toolsession.HashKey(opt.Key), MaxLive: 2, WaitedMs: 3000, Outcome: tool.CapacityRefused}) {
		t.Fatalf("refusal event = %v %+v %+v", ok, e, p)
	}
	if strings.Contains(fmt.Sprintf("%+v", *p), "secret") {
		t.Fatal("the raw key reached the payload")
	}
	if _, ok := tool.CapacityEvent(o, opt, nil, errors.New("something else")); ok {
		t.Fatal("an event for a failure that is not a capacity refusal")
	}
	tier := toolsession.NewTier(toolsession.Config{})
	l, err := tier.Hold(context.Background(), o, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, ok := tool.CapacityEvent(o, opt, l, nil); ok {
		t.Fatal("an event for a lease that got room at once")
	}
}
