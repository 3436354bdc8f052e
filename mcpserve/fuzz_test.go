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

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc", "BEARER a.b-c_d~e+f/g=", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "Bearer a\tb", " Bearer abc", "Bearerabc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := mcpserve.BearerToken(header)
		if !ok {
			if tok != "" {
				t.Fatalf("not ok but token %q", tok)
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			t.Fatalf("token %q from %q", tok, header)
		}
		if !strings.EqualFold(header[:len("bearer ")], "bearer ") || !strings.HasSuffix(header, tok) {
			t.Fatalf("token %q does not come from %q", tok, header)
		}
		// What was read is read back the same way.
		if again, ok := mcpserve.BearerToken("Bearer " + tok); !ok || again != tok {
			t.Fatalf("round trip of %q: %q %v", tok, again, ok)
		}
	})
}

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
