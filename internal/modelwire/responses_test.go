package modelwire_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// OpenAI's own SDK drives the Responses server as Codex does: a streamed
// turn whose output is text, a freeform (custom) tool call and a function
// call, each in deltas, ended by response.completed with the usage; then
// the calls' outputs sent back, which the script sees with the tools an
// additional_tools item offers; and a refusal, in OpenAI's error shape,
// of an output that answers no call.
func TestResponsesThroughTheSDK(t *testing.T) {
	var turns []modelwire.Turn
	s := modelwire.NewResponses(modelwire.Options{APIKey: "sk-k", Script: func(turn modelwire.Turn) modelwire.Reply {
		turns = append(turns, turn)
		if turn.Answered == 0 {
			return modelwire.Reply{Text: "Let me compute that.", Calls: []modelwire.Call{
				{Name: "exec", Input: `text(6*7)`},
				{Name: "run_code", Args: json.RawMessage(`{"code":"print(6*7)"}`)},
			}}
		}
		return modelwire.Reply{Text: "Both said " + strings.Join(turn.ToolResults, " and ")}
	}})
	defer s.Close()
	client := openai.NewClient(option.WithBaseURL(s.URL+"/v1"), option.WithAPIKey("sk-k"), option.WithMaxRetries(0))
	ctx := context.Background()

	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("what is 6*7?")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfCustom("exec"),
			responses.ToolParamOfFunction("run_code", map[string]any{"type": "object"}, false)},
	})
	var text, input, args strings.Builder
	var done *responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.custom_tool_call_input.delta":
			input.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			done = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "Let me compute that." || input.String() != "text(6*7)" || args.String() != `{"code":"print(6*7)"}` {
		t.Fatalf("streamed text %q, custom input %q, arguments %q", text.String(), input.String(), args.String())
	}
	if done == nil || len(done.Output) != 3 || done.Usage.InputTokens == 0 || done.Usage.OutputTokens == 0 {
		t.Fatalf("response.completed: %+v", done)
	}
	custom, fn := done.Output[1].AsCustomToolCall(), done.Output[2].AsFunctionCall()
	if custom.Name != "exec" || custom.Input != "text(6*7)" || fn.Name != "run_code" || custom.CallID == "" || fn.CallID == "" {
		t.Fatalf("the calls: %+v %+v", custom, fn)
	}
	if len(turns) != 1 || turns[0].Asked != "what is 6*7?" || !turns[0].Stream || !slices.Equal(turns[0].Tools, []string{"exec", "run_code"}) {
		t.Fatalf("the script saw %+v", turns)
	}

	history := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfAdditionalTools([]responses.ToolUnionParam{
			responses.ToolParamOfNamespace("", "functions", []responses.NamespaceToolToolUnionParam{{OfCustom: &responses.CustomToolParam{Name: "exec"}}}),
		}),
		responses.ResponseInputItemParamOfMessage("what is 6*7?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfCustomToolCall(custom.CallID, custom.Input, custom.Name),
		responses.ResponseInputItemParamOfCustomToolCallOutput(custom.CallID, "42"),
		responses.ResponseInputItemParamOfFunctionCall(fn.Arguments, fn.CallID, fn.Name),
		responses.ResponseInputItemParamOfFunctionCallOutput("42\n"),
	}
	history[5].OfFunctionCallOutput.CallID = openai.String(fn.CallID) // the helper takes the output only
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: history}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.OutputText(); got != "Both said 42 and 42\n" {
		t.Fatalf("answer %q", got)
	}
	last := turns[len(turns)-1]
	if last.Answered != 2 || last.Asked != "what is 6*7?" || !slices.Contains(last.Tools, "exec") {
		t.Fatalf("the script saw %+v", last)
	}

	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: history[3:4]}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "No tool call found") {
		t.Fatalf("an output that answers no call: %v", err)
	}
	bad := openai.NewClient(option.WithBaseURL(s.URL+"/v1"), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err = bad.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("a wrong key: %v", err)
	}
}
