package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/client"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// The generated client against a host: open a conversation, run a turn,
// read the transcript, close it, and match an error by its code.
func Example() {
	ctx := context.Background()
	url, token, stop := startHost(ctx)
	defer stop()

	c, err := client.NewClientWithResponses(url, client.WithRequestEditorFn(client.BearerToken(token)))
	if err != nil {
		panic(err)
	}
	opened, err := c.CreateSessionWithResponse(ctx, client.CreateSessionRequest{})
	if err != nil || opened.JSON201 == nil {
		panic(fmt.Sprint("opening: ", err, " ", string(opened.Body)))
	}
	id := opened.JSON201.SessionId
	fmt.Println("state:", opened.JSON201.State)

	turn, err := c.SendMessageWithResponse(ctx, id, client.TurnRequest{Message: "hi"})
	if err != nil || turn.JSON200 == nil {
		panic(fmt.Sprint("the turn: ", err, " ", string(turn.Body)))
	}
	fmt.Println("output:", turn.JSON200.Output)

	msgs, err := c.GetMessagesWithResponse(ctx, id)
	if err != nil || msgs.JSON200 == nil {
		panic(err)
	}
	for _, m := range msgs.JSON200.Messages {
		fmt.Printf("%s: %s\n", m.Role, *m.Content)
	}

	if closed, err := c.CloseSessionWithResponse(ctx, id); err != nil || closed.StatusCode() != 204 {
		panic(err)
	}
	again, err := c.SendMessageWithResponse(ctx, id, client.TurnRequest{Message: "still there?"})
	if err != nil || again.JSONDefault == nil {
		panic(err)
	}
	fmt.Println("after closing:", again.StatusCode(), again.JSONDefault.Error.Code)
	// Output:
	// state: open
	// output: hello from the agent
	// user: hi
	// assistant: hello from the agent
	// after closing: 409 session_closed
}

// startHost serves a host with the native agent on a scripted model, on a
// SQLite store in a temporary directory, and returns its address, a token
// and how to stop it.
func startHost(ctx context.Context) (url, token string, stop func()) {
	dir, err := os.MkdirTemp("", "agentry-client-example-")
	if err != nil {
		panic(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agentry.db"))
	if err != nil {
		panic(err)
	}
	bus := event.NewBus(event.BusOptions{})
	reg, inst, err := native.Open(ctx, native.Config{
		Store:      native.HostStore(st),
		TurnRunIDs: true,
		Agent: native.Fixed(agent.Options{
			Model:  scripted.New(scripted.Step{Text: "hello from the agent"}),
			Routes: []agent.Route{{Sink: bus, Filter: event.Filter{Tier: event.TierFull}}},
		}),
	}, provider.WithEvents(bus.Export))
	if err != nil {
		panic(err)
	}
	token, line, err := host.GenerateToken(tool.Identity{Tenant: "acme", Principal: "alice"})
	if err != nil {
		panic(err)
	}
	auth, err := host.ParseTokens(strings.NewReader(line))
	if err != nil {
		panic(err)
	}
	h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, Bus: bus})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	return srv.URL, token, func() {
		_ = h.Shutdown(ctx)
		srv.Close()
		_ = reg.Dispose(ctx)
		_ = os.RemoveAll(dir)
	}
}
