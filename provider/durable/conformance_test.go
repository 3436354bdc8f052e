package durable_test

import (
	"context"
	"encoding/json"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// kitModel drives the durable provider through the kit: "ask" calls a
// tool that waits for a person (an approval request), "hold" calls a tool
// that runs until its turn is interrupted, "call conformance_echo …" calls
// the host tool the kit lends, anything else is answered.
type kitModel struct{}

func (kitModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == llm.RoleTool {
		return llm.Response{Text: "after " + last.Content, StopReason: llm.StopEnd}, nil
	}
	if strings.HasPrefix(last.Content, "call "+conformance.HostToolName) {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c-host", Name: conformance.HostToolName, Args: json.RawMessage(`{"text":"hi"}`)}}, StopReason: llm.StopToolUse}, nil
	}
	switch last.Content {
	case "ask":
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c-ask", Name: "gated", Args: json.RawMessage(`{}`)}}, StopReason: llm.StopToolUse}, nil
	case "hold":
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c-hold", Name: "hang", Args: json.RawMessage(`{}`)}}, StopReason: llm.StopToolUse}, nil
	}
	return llm.Response{Text: "echo: " + last.Content, StopReason: llm.StopEnd}, nil
}

// The durable provider passes the conformance kit on a real Temporal
// server: every check of what it declares (resume, a waiting turn across
// a re-open, interrupt, approval requests).
func TestConformance(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	type none struct{}
	gated := tool.WithCheckIn(tool.Func("gated", "asks first", func(context.Context, *tool.Call, none) (string, error) { return "gated ran", nil }))
	hang := tool.Func("hang", "runs until stopped", func(ctx context.Context, _ *tool.Call, _ none) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	d, err := durable.NewDriver(durable.Config{Client: c, TaskQueue: uniq(t), Replica: "kit", Model: kitModel{},
		Tools: []tool.Tool{gated, hang}, Store: native.NewMemoryStore(0), Heartbeat: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, d, conformance.Fixture{Prompt: "hello", RequestPrompt: "ask", InterruptPrompt: "hold",
		HostToolPrompt: "call " + conformance.HostToolName + ` with {"text":"hi"}`, Timeout: 30 * time.Second})
}
