package mcpserve_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// The door's cost per call, against the same tool called directly (the
// baseline): BenchmarkDirect, BenchmarkServed (validation, a fresh call id,
// the SDK's JSON-RPC over an in-memory pipe) and BenchmarkServedSession
// (plus building a call-scoped registration and firing it).

type benchIn struct {
	Name string `json:"name"`
}

func benchTools() []tool.Tool {
	plain := tool.Func("plain", "answers", func(_ context.Context, _ *tool.Call, a benchIn) (string, error) { return a.Name, nil })
	withSession := tool.Func("session", "holds a session for the call", func(_ context.Context, c *tool.Call, a benchIn) (string, error) {
		if _, err := c.OnTeardown(func(context.Context) error { return nil }, toolsession.Options{Scope: toolsession.ScopeCall}); err != nil {
			return "", err
		}
		return a.Name, nil
	})
	return []tool.Tool{plain, withSession}
}

func BenchmarkDirect(b *testing.B) {
	t := benchTools()[0]
	args := json.RawMessage(`{"name":"x"}`)
	ctx := context.Background()
	for b.Loop() {
		c := tool.NewCall("plain", "id", "", "", nil, nil, nil)
		if _, err := t.Call(ctx, c, args); err != nil {
			b.Fatal(err)
		}
	}
}

func benchServed(b *testing.B, name string) {
	s, err := mcpserve.New(benchTools(), mcpserve.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cs.Close(); _ = ss.Wait(); _ = s.Shutdown(ctx) }()
	params := &mcp.CallToolParams{Name: name, Arguments: map[string]any{"name": "x"}}
	for b.Loop() {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkServed(b *testing.B)        { benchServed(b, "plain") }
func BenchmarkServedSession(b *testing.B) { benchServed(b, "session") }
