package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// Every turn is bounded by Options.TurnTimeout, 30 minutes unless set:
// a turn still running then is interrupted through the contract and ends
// timed_out — 504 turn_timed_out to its client, timed_out in the turn log
// and the transcript, its run-scoped tool session closed. The clock is
// synctest's: the test takes no time, and the turn ends exactly at the
// bound.
func TestTurnTimeoutBoundsEveryTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws, g, rec := newWorkspaces(t), newGate(), newRecorder()
		bus := event.NewBus(event.BusOptions{})
		if err := bus.Add(rec, event.Filter{Tier: event.TierFull}); err != nil {
			t.Fatal(err)
		}
		st := openStore(t, filepath.Join(t.TempDir(), "agentry.db"))
		nd, err := native.NewDriver(native.Config{TurnRunIDs: true, Store: native.HostStore(st),
			Agent: func(context.Context, provider.Definition) (agent.Options, error) {
				return agent.Options{ID: "timeout-test", Model: cmdModel{}, Tools: []tool.Tool{g.tool(ws)},
					Routes: []agent.Route{{Sink: bus, Filter: event.Filter{Tier: event.TierFull}}}}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		reg, err := provider.OpenRegistry(ctx, []provider.Driver{nd}, []provider.Definition{{ID: "agents", Provider: nd.ProviderKey()}}, provider.WithEvents(bus.Export))
		if err != nil {
			t.Fatal(err)
		}
		inst, _ := reg.Instance("agents")
		auth, toks := tokensFor(t, nil)
		h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, Bus: bus, EvictEvery: -1, RetentionEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if err := reg.Dispose(ctx); err != nil {
				t.Errorf("dispose: %v", err)
			}
		}()
		serve := func(method, path, body string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(method, path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+toks["alice"])
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			validating(t, h).ServeHTTP(w, req)
			return w
		}
		var opened struct{ SessionID string }
		if w := serve("POST", "/v1/sessions", "{}"); w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &opened) != nil {
			t.Fatalf("open: %d %s", w.Code, w.Body)
		}
		id := opened.SessionID

		began := time.Now()
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- serve("POST", "/v1/sessions/"+id+"/turns", `{"message":"call gate"}`) }()
		<-g.entered
		w := <-done // the gate waits for a release that never comes
		if took := time.Since(began); took != host.DefaultTurnTimeout {
			t.Fatalf("the turn ended after %s, want exactly %s", took, host.DefaultTurnTimeout)
		}
		var answer struct {
			Error struct{ Code, Message string }
		}
		if w.Code != http.StatusGatewayTimeout || json.Unmarshal(w.Body.Bytes(), &answer) != nil || answer.Error.Code != string(host.CodeTurnTimedOut) ||
			!strings.Contains(answer.Error.Message, "30m0s") || !strings.Contains(answer.Error.Message, "--turn-timeout") {
			t.Fatalf("the answer: %d %s", w.Code, w.Body)
		}
		turns, err := st.Turns(ctx, owners["alice"], id)
		if err != nil || len(turns) != 1 || turns[0].Outcome != host.TurnTimedOut || !strings.Contains(turns[0].Error, "turn timeout (30m0s)") {
			t.Fatalf("the turn log: %+v, %v", turns, err)
		}
		c, err := st.Load(ctx, owners["alice"], id)
		if n := len(c.Transcript); err != nil || n == 0 || !strings.HasPrefix(c.Transcript[n-1].Content, "timed out") || c.State != host.StateOpen {
			t.Fatalf("the conversation: %+v, %v", c, err)
		}
		if open, opened, closed := ws.stats(); open != 0 || opened != 1 || closed != 1 {
			t.Fatalf("workspaces after the timeout: %d open, %d opened, %d closed", open, opened, closed)
		}
		if ev := rec.ofType(host.TypeTurnFailed); len(ev) != 1 || ev[0].Meta.SessionID != id {
			t.Fatalf("turn_failed events: %+v", ev)
		}
		// The conversation goes on, with the same bound.
		w = serve("POST", "/v1/sessions/"+id+"/turns", `{"message":"hello"}`)
		if w.Code != 200 || !strings.Contains(w.Body.String(), "you said: hello") {
			t.Fatalf("the next turn: %d %s", w.Code, w.Body)
		}
	})
}
