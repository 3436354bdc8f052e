package mcpserve_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
)

// Whatever arguments a client sends, the door answers with a result, never
// a protocol error or a crash: valid ones reach the tool, anything else is
// an error result that says what is wrong.
func FuzzCallArguments(f *testing.F) {
	for _, s := range []string{
		`{"name":"a"}`, `{"name":"a","count":3,"tags":["x"]}`, `{}`, `null`, `[]`, `"name"`, `7`,
		`{"name":1}`, `{"name":"a","count":1.5}`, `{"name":"a","tags":[1]}`, `{"name":"a","other":true}`,
		`{"name":"\u0000"}`, `{"name":"a","count":-9223372036854775808}`, `{"name":"a","count":1e400}`,
	} {
		f.Add([]byte(s))
	}
	type in struct {
		Name  string   `json:"name"`
		Count int      `json:"count,omitempty"`
		Tags  []string `json:"tags,omitempty"`
	}
	echo := tool.Func("echo", "echoes its arguments", func(_ context.Context, _ *tool.Call, a in) (in, error) { return a, nil })
	s, err := mcpserve.New([]tool.Tool{echo}, mcpserve.Options{OnError: func(err error) { f.Errorf("OnError: %v", err) }})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st)
	if err != nil {
		f.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fuzz", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })

	f.Fuzz(func(t *testing.T, args []byte) {
		if !json.Valid(args) {
			t.Skip("the client cannot send invalid JSON")
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("arguments %s: protocol error %v", args, err)
		}
		msg := text(t, res)
		if res.IsError {
			if !strings.HasPrefix(msg, "invalid arguments for tool echo") {
				t.Fatalf("arguments %s: error result %q does not say what is wrong", args, msg)
			}
			return
		}
		var got in
		if err := json.Unmarshal([]byte(msg), &got); err != nil {
			t.Fatalf("arguments %s: result %q: %v", args, msg, err)
		}
	})
}
