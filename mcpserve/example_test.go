package mcpserve_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// A tool that holds a resource for one call registers its release with
// OnTeardown; the door releases it when the call settles, before the client
// sees the answer.
func Example() {
	type noteIn struct {
		Text string `json:"text" jsonschema:"what to write"`
	}
	var dir string
	note := tool.Func("note", "Writes a note into a scratch directory that lives for one call.",
		func(_ context.Context, c *tool.Call, in noteIn) (string, error) {
			d, err := os.MkdirTemp("", "note-*")
			if err != nil {
				return "", err
			}
			// Register first thing after opening, so nothing can leak it.
			if _, err := c.OnTeardown(func(context.Context) error { return os.RemoveAll(d) },
				toolsession.Options{Scope: toolsession.ScopeCall, Label: "scratch-dir"}); err != nil {
				_ = os.RemoveAll(d)
				return "", err
			}
			dir = d
			return fmt.Sprintf("wrote %d bytes", len(in.Text)), os.WriteFile(filepath.Join(d, "note.txt"), []byte(in.Text), 0o600)
		})

	srv, err := mcpserve.New([]tool.Tool{note}, mcpserve.Options{OnError: func(err error) { fmt.Println("error:", err) }})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown(context.Background())

	// Any MCP client will do; here the Go SDK's, in memory.
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, _ := srv.Connect(ctx, st)
	cs, _ := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil).Connect(ctx, ct, nil)
	defer func() { cs.Close(); ss.Wait() }()

	res, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"text": "hello"}})
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	_, err = os.Stat(dir)
	fmt.Println("scratch directory gone:", os.IsNotExist(err))

	res, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"txt": "typo"}})
	fmt.Println(res.IsError, res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// wrote 5 bytes
	// scratch directory gone: true
	// true invalid arguments for tool note: field "txt": is not a known argument
}
