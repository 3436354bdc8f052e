package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	script "github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// A host drives an agentry agent through the registry: materialise a
// native instance, open a session that borrows one host tool and acts for
// one person, run turns (pulling their outputs), answer the approval a
// turn asks for, and close. The agent's model is scripted, so the example
// runs offline.
func Example() {
	ctx := context.Background()

	// The agent: a scripted model, and a tool a person must approve.
	var deployedFor *tool.Identity
	deploy := tool.WithCheckIn(tool.Func("deploy", "Deploys a version.",
		func(ctx context.Context, c *tool.Call, in struct {
			Version string `json:"version"`
		}) (string, error) {
			deployedFor = c.Identity
			return "deployed " + in.Version, nil
		}))
	driver, err := native.NewDriver(native.Config{Agent: func(ctx context.Context, def provider.Definition) (agent.Options, error) {
		return agent.Options{ID: def.ID, Tools: []tool.Tool{deploy}, Model: script.New(
			// Turn 1: look the ticket up with the host's tool, then answer.
			script.Step{Text: "Looking it up.", ToolCalls: []llm.ToolCall{{Name: "ticket_status", Args: json.RawMessage(`{"id":"T-7"}`)}}},
			script.Step{Text: "T-7 is open."},
			// Turn 2: deploy, which waits for a person's approval.
			script.Step{ToolCalls: []llm.ToolCall{{Name: "deploy", Args: json.RawMessage(`{"version":"1.2"}`)}}},
			script.Step{Text: "Deployed 1.2."},
		)}, nil
	}})
	if err != nil {
		log.Fatal(err)
	}

	reg, err := provider.OpenRegistry(ctx, []provider.Driver{driver},
		[]provider.Definition{{ID: "helper", Provider: native.DefaultKey}})
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

	// The host lends the session one tool for its lifetime, and says who
	// the session acts for: the provider never invents an identity.
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
	session, err := inst.Adapter().Create(ctx, provider.CreateRequest{
		SessionID:        "conversation-1",
		WorkingDirectory: "/srv/work",
		Configuration:    native.SessionConfig{Identity: &tool.Identity{Tenant: "acme", Principal: "alice"}}.JSON(),
		HostBinding:      lend,
		OnBinding: func(b provider.Binding) {
			fmt.Println("store the binding to resume later:", strings.HasPrefix(string(b), "native-"))
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	show := func(out provider.Output, err error) {
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case out.Kind == provider.OutputText, out.Kind == provider.OutputActivity:
			fmt.Printf("  %s: %s\n", out.Kind, out.Text)
		case out.Kind == provider.OutputRequest:
			fmt.Printf("  %s: %s to run %s\n", out.Kind, out.Request.Kind, out.Request.Tool)
		case out.Kind == provider.OutputTurnCompleted:
			fmt.Printf("  %s: %s\n", out.Kind, out.Outcome)
		case out.Kind == provider.OutputUsage:
			fmt.Printf("  %s: %d model calls, tools %v\n", out.Kind, out.Usage.ModelCalls, out.Usage.ToolCalls)
		default:
			fmt.Printf("  %s\n", out.Kind)
		}
	}

	fmt.Println("turn 1")
	for out, err := range session.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "What is the state of T-7?"}) {
		show(out, err)
	}

	fmt.Println("turn 2")
	var pending *provider.Request
	for out, err := range session.RunTurn(ctx, provider.TurnRequest{TurnID: "t2", Input: "Deploy 1.2."}) {
		show(out, err)
		if out.Kind == provider.OutputRequest {
			pending = out.Request
		}
	}
	fmt.Println("a person approves")
	for out, err := range session.Resolve(ctx, provider.Resolution{TurnID: "t2", RequestID: pending.ID, Approve: true}) {
		show(out, err)
	}
	fmt.Printf("deploy ran for %s/%s\n", deployedFor.Tenant, deployedFor.Principal)

	if err := session.Close(ctx, provider.CloseRequested); err != nil {
		log.Fatal(err)
	}
	for _, err := range session.RunTurn(ctx, provider.TurnRequest{TurnID: "t3", Input: "hello"}) {
		fmt.Println("after close:", provider.CodeOf(err))
	}
	// Output:
	// readiness: ready
	// store the binding to resume later: true
	// turn 1
	//   turn.started
	//   text: Looking it up.
	//   activity: calling ticket_status
	//   activity: ticket_status returned
	//   text: T-7 is open.
	//   usage: 2 model calls, tools map[ticket_status:1]
	//   turn.completed: completed
	// turn 2
	//   turn.started
	//   usage: 1 model calls, tools map[]
	//   request: approval to run deploy
	// a person approves
	//   activity: calling deploy
	//   activity: deploy returned
	//   text: Deployed 1.2.
	//   usage: 1 model calls, tools map[deploy:1]
	//   turn.completed: completed
	// deploy ran for acme/alice
	// host binding released
	// after close: session_closed
}
