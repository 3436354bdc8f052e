package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// A host built on a provider: the native agent through native.Open, a
// SQLite store that also keeps the agent's conversations, one token, and
// one turn over HTTP.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "agentry-example-")
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, filepath.Join(dir, "agentry.db"))
	if err != nil {
		panic(err)
	}
	bus := event.NewBus(event.BusOptions{})
	reg, inst, err := native.Open(ctx, native.Config{
		Store:      native.HostStore(st),
		TurnRunIDs: true, // the host's turn ids are unique: the agent's events name its runs
		Agent: native.Fixed(agent.Options{
			Model:  scripted.New(scripted.Step{Text: "hello from the agent"}),
			Routes: []agent.Route{{Sink: bus, Filter: event.Filter{Tier: event.TierFull}}},
		}),
	}, provider.WithEvents(bus.Export))
	if err != nil {
		panic(err)
	}
	token, line, _ := host.GenerateToken(tool.Identity{Tenant: "acme", Principal: "alice"})
	auth, _ := host.ParseTokens(strings.NewReader(line))
	h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, Bus: bus})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)

	call := func(method, path, body string) string {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	var id string
	fmt.Sscanf(strings.SplitAfter(call("POST", "/v1/sessions", ""), `"sessionId":"`)[1], "%36s", &id)
	out := call("POST", "/v1/sessions/"+id+"/turns", `{"message":"hi"}`)
	fmt.Println(strings.Contains(out, `"output":"hello from the agent"`))

	_ = h.Shutdown(ctx)
	srv.Close()
	_ = reg.Dispose(ctx)
	// Output: true
}
