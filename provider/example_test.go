package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
)

// A host drives a provider through the registry: materialise an instance,
// open a session that borrows one host tool, run turns (pulling their
// outputs), answer the approval a turn asks for, and close. The fake
// provider stands in for a real agent here.
func Example() {
	ctx := context.Background()
	reg, err := provider.OpenRegistry(ctx,
		[]provider.Driver{conformance.NewFakeDriver()},
		[]provider.Definition{{ID: "helper", Provider: conformance.FakeKey}})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Dispose(ctx)

	inst, err := reg.Instance("helper")
	if err != nil {
		log.Fatal(err)
	}
	ready, _ := inst.Readiness(ctx)
	fmt.Println("readiness:", ready)

	// The host lends the session one tool for its lifetime.
	lend := &provider.HostBinding{
		Tools: []provider.HostTool{{
			Name:        "ticket_status",
			Description: "Looks up a support ticket.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`),
			Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
				return provider.HostToolResult{Output: json.RawMessage(`{"status":"open"}`)}, nil
			},
		}},
		Release: func(context.Context) error { fmt.Println("host binding released"); return nil },
	}
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{
		SessionID:        "conversation-1",
		WorkingDirectory: "/srv/work",
		HostBinding:      lend,
		OnBinding:        func(b provider.Binding) { fmt.Println("store binding:", b) },
	})
	if err != nil {
		log.Fatal(err)
	}
	session := s.(*provider.ValidatedSession)

	show := func(out provider.Output, err error) {
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case out.Kind == provider.OutputText:
			fmt.Printf("  %s: %s\n", out.Kind, out.Text)
		case out.Kind == provider.OutputRequest:
			fmt.Printf("  %s: %s (%s)\n", out.Kind, out.Request.Prompt, out.Request.Kind)
		case out.Kind == provider.OutputTurnCompleted:
			fmt.Printf("  %s: %s\n", out.Kind, out.Outcome)
		default:
			fmt.Printf("  %s\n", out.Kind)
		}
	}

	fmt.Println("turn 1")
	for out, err := range session.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: `call ticket_status {"id":"T-7"}`}) {
		show(out, err)
	}

	fmt.Println("turn 2")
	var pending *provider.Request
	for out, err := range session.RunTurn(ctx, provider.TurnRequest{TurnID: "t2", Input: conformance.FakeAsk}) {
		show(out, err)
		if out.Kind == provider.OutputRequest {
			pending = out.Request
		}
	}
	for out, err := range session.Resolve(ctx, provider.Resolution{TurnID: "t2", RequestID: pending.ID, Approve: true}) {
		show(out, err)
	}

	if err := session.Close(ctx, provider.CloseRequested); err != nil {
		log.Fatal(err)
	}
	for _, err := range session.RunTurn(ctx, provider.TurnRequest{TurnID: "t3", Input: "hello"}) {
		fmt.Println("after close:", provider.CodeOf(err))
	}
	// Output:
	// readiness: ready
	// store binding: fake-helper-1
	// turn 1
	//   turn.started
	//   text: the tool said: {"status":"open"}
	//   turn.completed: completed
	// turn 2
	//   turn.started
	//   request: may the fake go on? (approval)
	//   text: approved
	//   turn.completed: completed
	// host binding released
	// after close: session_closed
}
