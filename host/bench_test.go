package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider/native"
)

// benchHost is a host on a real listener with the scripted model (no
// tools) and SQLite, and n sessions of one principal open on it.
func benchHost(b *testing.B, n, steps int) (url, token string, ids []string) {
	return benchHostWith(b, n, steps, nil)
}

// benchHostWith is benchHost holding turns to budgets (nil: none).
func benchHostWith(b *testing.B, n, steps int, budgets *host.Budgets) (url, token string, ids []string) {
	b.Helper()
	ss := make([]scripted.Step, steps)
	for i := range ss {
		ss[i] = scripted.Step{Text: "ok"}
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "agentry.db"))
	if err != nil {
		b.Fatal(err)
	}
	router := host.NewEventSink()
	model := scripted.New(ss...)
	reg, inst, err := native.Open(ctx, native.Config{Store: native.HostStore(st), TurnRunIDs: true,
		Agent: native.Fixed(agent.Options{Model: model, Routes: []agent.Route{{Sink: router, Filter: router.Filter()}}})})
	if err != nil {
		b.Fatal(err)
	}
	tok, line, _ := host.GenerateToken(alice)
	auth, _ := host.ParseTokens(strings.NewReader(line))
	h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, EventSink: router, EvictEvery: -1, RetentionEvery: -1,
		MaxTurns: 1024, MaxTurnsPerPrincipal: 1024, MaxConversationsPerPrincipal: n + 1, Budgets: budgets,
		MaxCreatesPerMinute: -1}) // the bench opens its sessions at once
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(func() {
		_ = h.Shutdown(ctx)
		srv.Close()
		_ = reg.Dispose(ctx)
	})
	for range n {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/sessions", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var v struct{ SessionID string }
		_ = json.NewDecoder(res.Body).Decode(&v)
		res.Body.Close()
		if res.StatusCode != 201 || v.SessionID == "" {
			b.Fatalf("opening a session: status %d", res.StatusCode)
		}
		ids = append(ids, v.SessionID)
	}
	return srv.URL, tok, ids
}

func post(b *testing.B, c *http.Client, url, token string, body []byte) {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body2, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		b.Fatalf("status %d %s %s", res.StatusCode, url, body2)
	}
}

var turnBody = []byte(`{"message":"hello"}`)

// benchClient keeps a connection per goroutine alive, as a real client
// pool would.
var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

// BenchmarkBaselineHTTP is a bare net/http JSON handler over the same
// client: what HTTP costs here.
func BenchmarkBaselineHTTP(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Message string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"output":"ok","runId":"run-x"}`))
	}))
	defer srv.Close()
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		c := benchClient
		for pb.Next() {
			post(b, c, srv.URL, "x", turnBody)
		}
	})
}

// BenchmarkTurn is one answered turn through the host: HTTP, auth, the
// agent with the scripted model, and a saved result. Parallel over 64
// sessions, one goroutine each; the baseline runs 64 goroutines too.
func BenchmarkTurn(b *testing.B) {
	const sessions = 64
	url, tok, ids := benchHost(b, sessions, b.N+2)
	var next atomic.Int64
	b.SetParallelism(sessions / runtime.GOMAXPROCS(0)) // one goroutine per session
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := benchClient
		id := ids[int(next.Add(1)-1)%sessions]
		for pb.Next() {
			post(b, c, fmt.Sprintf("%s/v1/sessions/%s/turns", url, id), tok, turnBody)
		}
	})
}

// benchBudgets bind alice by every kind of cap, per day and per month,
// and by a rate, none of them reached: what checking them costs.
const benchBudgets = `
[[cap]]
tenant = "*"
principal = "*"
per = "day"
turns = 1000000000
tokens = 1000000000000
cost_usd = 1000000.0
sandbox = "100000h"

[[cap]]
tenant = "acme"
per = "month"
turns = 1000000000

[[rate]]
tenant = "*"
principal = "*"
turns = 10000
per = "1s"
`

// BenchmarkTurnBudgets runs turns on two hosts side by side, one
// without budgets (off) and one with caps and a rate that apply to every
// turn (on), alternating turn by turn so that the machine's load falls on
// both alike; it reports each one's mean turn time and their ratio:
// go test -run '^$' -bench TurnBudgets -benchtime 3000x -count 5 ./host
func BenchmarkTurnBudgets(b *testing.B) {
	bud, err := host.ParseBudgets([]byte(benchBudgets))
	if err != nil {
		b.Fatal(err)
	}
	const sessions = 64
	offURL, offTok, offIDs := benchHostWith(b, sessions, b.N+2, nil)
	onURL, onTok, onIDs := benchHostWith(b, sessions, b.N+2, bud)
	var next, offNs, onNs atomic.Int64
	b.SetParallelism(sessions / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := benchClient
		i := int(next.Add(1)-1) % sessions
		off := fmt.Sprintf("%s/v1/sessions/%s/turns", offURL, offIDs[i])
		on := fmt.Sprintf("%s/v1/sessions/%s/turns", onURL, onIDs[i])
		for n := 0; pb.Next(); n++ {
			first, second := off, on
			firstTok, secondTok := offTok, onTok
			firstNs, secondNs := &offNs, &onNs
			if n%2 == 1 { // each goes first half the time
				first, second, firstTok, secondTok, firstNs, secondNs = on, off, onTok, offTok, &onNs, &offNs
			}
			t0 := time.Now()
			post(b, c, first, firstTok, turnBody)
			t1 := time.Now()
			post(b, c, second, secondTok, turnBody)
			firstNs.Add(int64(t1.Sub(t0)))
			secondNs.Add(int64(time.Since(t1)))
		}
	})
	b.ReportMetric(float64(offNs.Load())/float64(b.N)/1e6, "off-ms/turn")
	b.ReportMetric(float64(onNs.Load())/float64(b.N)/1e6, "on-ms/turn")
	b.ReportMetric(float64(onNs.Load())/float64(offNs.Load()), "on/off")
}
