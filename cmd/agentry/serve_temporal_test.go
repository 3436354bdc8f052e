package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// serve --temporal: a turn under --check-in run_code pauses as a workflow
// waiting for a signal; the host stops and starts again on the same store;
// the decision endpoint of the new process signals the workflow, which
// runs the code once and answers.
func TestServeTemporalPauseSurvivesRestart(t *testing.T) {
	needPython(t)
	addr := temporaltest.Addr(t)
	dir := t.TempDir()
	tokens, toks := writeTokens(t, "alice")
	tok := toks["alice"]
	o := serveDefaults(t)
	o.tokens = tokens
	o.runner = "process"
	o.checkIns = []string{"run_code"}
	o.temporal = addr
	o.temporalNamespace = "default"
	o.temporalReplica = fmt.Sprintf("serve-test-%d", time.Now().UnixNano())
	marks := filepath.Join(dir, "marks")

	s := startServe(t, o)
	code, m := call(t, "POST", s.url+"/v1/sessions", tok, "")
	if code != 201 {
		t.Fatalf("open: %d %v", code, m)
	}
	id := m["sessionId"].(string)
	code, m = call(t, "POST", s.url+"/v1/sessions/"+id+"/turns", tok,
		turnBody(fmt.Sprintf("open(%q, 'a').write('x\\n')\nprint(6*7)", marks)))
	if aw, _ := m["awaiting"].(map[string]any); code != 202 || aw["tool"] != "run_code" {
		t.Fatalf("a turn under --check-in run_code: %d %v", code, m)
	}
	s.stop(t)

	s = startServe(t, o)
	defer s.stop(t)
	sess := s.url + "/v1/sessions/" + id
	if code, m = call(t, "GET", sess, tok, ""); code != 200 || m["state"] != "paused" {
		t.Fatalf("after the restart: %d %v", code, m)
	}
	if code, m = call(t, "POST", sess+"/decision", tok, `{"approve":true}`); code != 200 || m["output"] != "42" {
		t.Fatalf("approved after the restart: %d %v", code, m)
	}
	raw, err := os.ReadFile(marks)
	if err != nil || string(raw) != "x\n" {
		t.Fatalf("the code ran %q times (%v); want once", raw, err)
	}
}

// Two `agentry serve --temporal` replicas on one PostgreSQL store: a
// turn's tool call is in flight on A (model code that waits for a file
// the test makes) when A is killed with SIGKILL. A starts again under
// the same replica name; the turn's workflow goes on (on A again or on
// B): the call in flight is reported to the model as lost and not run
// again, the call that completed earlier in the same turn is not
// repeated, nor the turn before's (the file the code appends to holds
// one line per call that started), the conversation's
// record marks the turn and holds the lost call's result, the host's
// turn log has B's takeover, and `agentry events audit` is clean on the
// survivors' events files.
func TestServeTemporalKilledMidTurn(t *testing.T) {
	needPython(t)
	addr := temporaltest.Addr(t)
	dsn := pgtest.DSN(t)
	bin := binary(t)
	dir := t.TempDir()
	tokens, toks := writeTokens(t, "alice")
	tok := toks["alice"]
	const lease = 5 * time.Second
	queue := fmt.Sprintf("killed-mid-turn-%d", time.Now().UnixNano())
	model := programsModel(t)
	message := programsMessage
	serve := func(replica, events string) *process {
		p := startServeBinary(t, bin, anthropicOfflineEnv(model.URL),
			"--store", dsn, "--tokens", tokens, "--events", events,
			"--runner", "process", "--model", "anthropic:claude-offline", "--lease", lease.String(), "--drain", "20s",
			"--temporal", addr, "--temporal-task-queue", queue, "--temporal-replica", replica)
		p.token = tok
		return p
	}
	events := func(name string) string { return filepath.Join(dir, name+".ndjson") }
	a := serve("a", events("a"))
	b := serve("b", events("b"))

	marks := filepath.Join(dir, "marks")
	inFlight := filepath.Join(dir, "in-flight")
	if err := syscall.Mkfifo(inFlight, 0o600); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(dir, "go")
	// Whatever happens, a code run still waiting is let go.
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })

	code, body := a.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	var sess struct{ SessionID string }
	_ = json.Unmarshal(body, &sess)
	turns := "/v1/sessions/" + sess.SessionID + "/turns"
	if code, body := a.call(t, "POST", turns, message(fmt.Sprintf("open(%q, 'a').write('one\\n')\nprint('one')", marks))); code != 200 ||
		!strings.Contains(string(body), `"output":"one"`) {
		t.Fatalf("turn 1 on A: %d %s", code, body)
	}

	// Turn 2 streams from A: its first call completes, its second says it
	// runs (the fifo), then waits.
	type sse struct{ name, data string }
	seen := make(chan sse, 256)
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		req, _ := http.NewRequest("POST", a.url+turns, strings.NewReader(message(
			fmt.Sprintf("open(%q, 'a').write('two-a\\n')\nprint('a')", marks),
			fmt.Sprintf("open(%q, 'a').write('two-b\\n')\nf = open(%q, 'w'); f.write('in'); f.close()\nimport os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.01)\nprint('b')",
				marks, inFlight, gate))))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		name := ""
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				name = n
			} else if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				select {
				case seen <- sse{name, d}:
				default:
				}
			}
		}
	}()
	if _, err := os.ReadFile(inFlight); err != nil { // returns once the code has written it
		t.Fatal(err)
	}
	// The stream showed the tool call starting while it runs; its run id
	// is the turn's, which names the workflow.
	turnID := ""
	for turnID == "" {
		e, ok := <-seen
		if !ok {
			t.Fatal("the stream from A ended before its tool call started")
		}
		if e.name == string(tool.TypeCallStart) {
			var ev struct {
				Meta struct{ RunID string } `json:"meta"`
			}
			_ = json.Unmarshal([]byte(e.data), &ev)
			turnID = ev.Meta.RunID
		}
	}

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.wait()
	killed := time.Now()
	<-streamed // the client saw the connection break
	a2 := serve("a", events("a2"))

	// The workflow goes on without A's process; the test follows it on
	// the Temporal server.
	c, err := client.Dial(client.Options{HostPort: addr, Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var binding string
	if err := db.QueryRow(`SELECT binding FROM agentry_native`).Scan(&binding); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res durable.TurnResult
	if err := c.GetWorkflow(ctx, "agentry/"+binding+"/"+turnID, "").Get(ctx, &res); err != nil {
		t.Fatalf("the turn's workflow: %v\nA again:\n%s\nB:\n%s", err, a2.stderr, b.stderr)
	}
	lost := time.Since(killed)
	if res.Outcome != "completed" || !strings.Contains(res.Answer, "lost while it ran") || !strings.Contains(res.Answer, "will not be re-run") {
		t.Fatalf("the turn ended %q, answering %q (%s)", res.Outcome, res.Answer, res.Problem)
	}
	t.Logf("the turn's in-flight tool call was reported lost and the turn ended %s after A was killed", lost.Round(100*time.Millisecond))
	if raw, err := os.ReadFile(marks); err != nil || string(raw) != "one\ntwo-a\ntwo-b\n" {
		t.Fatalf("the code's side effects: %q (%v); want one line per call that started", raw, err)
	}
	// The conversation's record has the turn: marked, its lost call an
	// error result the model read.
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := native.HostStore(st).Load(ctx, provider.Binding(binding))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Turns); n != 2 || rec.Turns[1].ID != turnID {
		t.Fatalf("the conversation's turn log: %+v; want turn 1 and the killed turn %s", rec.Turns, turnID)
	}
	msgs := rec.Conversation.Messages
	// Turn 1: asked, call, result, answer; turn 2: asked, call, result,
	// call, the lost call's result, answer.
	if len(msgs) != 10 || msgs[6].Role != llm.RoleTool || msgs[6].IsError || msgs[8].Role != llm.RoleTool || !msgs[8].IsError ||
		!strings.Contains(msgs[8].Content, "lost while it ran") || msgs[9].Content != res.Answer {
		t.Fatalf("the stored conversation: %+v", msgs)
	}

	// The host's turn log gets the killed turn's end too: a client polling
	// it (on B) sees it once A's lease has lapsed — completed, as the
	// conversation's record shows.
	var entry map[string]any
	for entry == nil {
		code, body := b.call(t, "GET", turns, "")
		var log struct{ Turns []map[string]any }
		if code != 200 || json.Unmarshal(body, &log) != nil {
			t.Fatalf("the turn log: %d %s", code, body)
		}
		for _, e := range log.Turns {
			if e["runId"] == turnID && e["kind"] == "message" {
				entry = e
			}
		}
		if entry == nil {
			if time.Since(killed) > 3*lease+time.Minute {
				t.Fatalf("the killed turn never reached the turn log: %s", body)
			}
			time.Sleep(500 * time.Millisecond) // a client's polling
		}
	}
	if entry["outcome"] != host.TurnCompleted {
		t.Fatalf("the killed turn in the turn log: %+v", entry)
	}
	t.Logf("the killed turn reached the turn log (%s) %s after A was killed", entry["outcome"], time.Since(killed).Round(100*time.Millisecond))

	// The conversation goes on through B, which took it over (the turn
	// log says so), nothing run again.
	var out string
	for {
		code, body := b.call(t, "POST", turns, message(fmt.Sprintf("open(%q, 'a').write('three\\n')\nprint('three')", marks)))
		if code == 200 {
			var o struct{ Output string }
			_ = json.Unmarshal(body, &o)
			out = o.Output
			break
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"replica_unavailable"`) {
			t.Fatalf("through B after A died: %d %s", code, body)
		}
		if time.Since(killed) > 3*lease+time.Minute {
			t.Fatalf("B did not take over")
		}
		time.Sleep(time.Second) // the Retry-After it was given
	}
	t.Logf("B answered the next turn %s after A was killed (lease %s)", time.Since(killed).Round(100*time.Millisecond), lease)
	if out != "three" {
		t.Fatalf("turn 3 through B: %q", out)
	}
	if raw, _ := os.ReadFile(marks); string(raw) != "one\ntwo-a\ntwo-b\nthree\n" {
		t.Fatalf("after turn 3: %q", raw)
	}
	if code, body := b.call(t, "GET", turns, ""); code != 200 || strings.Count(string(body), `"kind":"takeover"`) != 1 {
		t.Fatalf("the turn log: %d %s", code, body)
	}

	for _, p := range []*process{a2, b} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(); err != nil {
			t.Fatalf("%s: %v\n%s", p.url, err, p.stderr)
		}
	}
	for _, name := range []string{"a2", "b"} {
		if out, errout, code := exe(t, bin, nil, "events", "audit", events(name)); code != 0 {
			t.Fatalf("agentry events audit %s: exit %d\n%s%s", name, code, out, errout)
		}
	}
	// What the survivors emitted for durable turns: B ran turn 3's tool
	// call; turn 2 ended on whichever replica took its workflow's steps.
	var types []string
	audit.Read([]string{events("a2"), events("b")}, func(e event.Event) {
		if e.Meta.RunID == turnID {
			types = append(types, string(e.Type))
		}
	})
	if !slices.Contains(types, string(event.TypeLLMEnd)) || !slices.Contains(types, string(event.TypeTurnEnd)) {
		t.Fatalf("the survivors' events of the killed turn: %v", types)
	}
}
