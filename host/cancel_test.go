package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// cancel posts a cancel and returns its answer.
func (f *fixture) cancel(who, id string) resp {
	f.t.Helper()
	return f.do("POST", "/v1/sessions/"+id+"/cancel", who, nil)
}

// lastTurn is the last entry of the conversation's turn log.
func lastTurn(t *testing.T, f *fixture, who, id string) map[string]any {
	t.Helper()
	log := turnLog(t, f, who, id)
	if len(log) == 0 {
		t.Fatal("the turn log is empty")
	}
	return log[len(log)-1]
}

// transcript is the conversation's messages as role: content lines.
func transcript(t *testing.T, f *fixture, who, id string) []string {
	t.Helper()
	r := f.do("GET", "/v1/sessions/"+id+"/messages", who, nil)
	want(t, r, 200, "")
	var body struct{ Messages []host.Message }
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range body.Messages {
		out = append(out, m.Role+": "+m.Content)
	}
	return out
}

// A running turn is cancelled through the contract: 202 at once, then
// the turn's own request answers 409 turn_cancelled, and the turn log and
// the transcript say cancelled. The run ended, so its run-scoped tool
// session closed; the conversation's session-scoped one is kept, and the
// conversation goes on. Whatever the provider.
func TestCancelARunningTurn(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		f := newFixture(t, config{kind: kind, real: true})
		id := f.open("alice")
		if kind == onNative {
			want(t, f.say("alice", id, `call files {"op":"write","name":"kept.txt","text":"still here"}`), 200, "")
		}
		held := f.hold("alice", id)
		r := f.cancel("alice", id)
		want(t, r, http.StatusAccepted, "")
		if m := r.json(t); m["sessionId"] != id || !strings.HasPrefix(m["runId"].(string), "run-") || m["waiting"] != nil {
			t.Fatalf("the cancel's answer: %s", r.body)
		}
		runID := r.json(t)["runId"]
		want(t, held.wait(), http.StatusConflict, string(host.CodeTurnCancelled))

		last := lastTurn(t, f, "alice", id)
		if last["outcome"] != host.TurnCancelled || last["runId"] != runID || !strings.Contains(last["error"].(string), "cancel") {
			t.Fatalf("the turn log's last entry: %v", last)
		}
		tr := transcript(t, f, "alice", id)
		if n := len(tr); n < 2 || !strings.HasPrefix(tr[n-1], "activity: cancelled") {
			t.Fatalf("the transcript does not say cancelled: %q", tr)
		}
		if s := f.do("GET", "/v1/sessions/"+id, "alice", nil).json(t); s["state"] != "open" {
			t.Fatalf("after the cancel: %v", s)
		}
		if kind == onNative {
			// The gate's run-scoped workspace closed (run-end); the files
			// workspace, scope session, is kept.
			if open, opened, closed := f.ws.stats(); open != 1 || opened != 2 || closed != 1 {
				t.Fatalf("workspaces after the cancel: %d open, %d opened, %d closed", open, opened, closed)
			}
			ev := f.rec.ofType(tool.TypeSessionClosed)
			if len(ev) != 1 {
				t.Fatalf("session_closed events: %+v", ev)
			}
			if b, _ := json.Marshal(ev[0].Payload); !strings.Contains(string(b), `"reason":"`+string(toolsession.ReasonRunEnd)+`"`) {
				t.Fatalf("the session closed with %s", b)
			}
			r = f.say("alice", id, `call files {"op":"read","name":"kept.txt"}`)
			want(t, r, 200, "")
			if out := r.json(t)["output"]; out != "tool said: still here" {
				t.Fatalf("the next turn: %s", r.body)
			}
			return
		}
		want(t, f.say("alice", id, "hello"), 200, "")
	})
}

// A streamed turn that is cancelled ends its stream with the provider's
// turn.completed (interrupted) and a result saying turn_cancelled.
func TestCancelEndsTheStream(t *testing.T) {
	f := newFixture(t, config{real: true})
	id := f.open("alice")
	done := make(chan resp, 1)
	go func() {
		done <- f.do("POST", "/v1/sessions/"+id+"/turns", "alice", map[string]string{"message": "call gate"}, "Accept", "text/event-stream")
	}()
	<-f.gate.entered
	want(t, f.cancel("alice", id), http.StatusAccepted, "")
	r := <-done
	if r.status != 200 {
		t.Fatalf("the stream: %d %s", r.status, r.body)
	}
	evs := readSSE(t, bytes.NewReader(r.body))
	if len(evs) < 2 {
		t.Fatalf("the stream: %s", r.body)
	}
	last, out := evs[len(evs)-1], evs[len(evs)-2]
	if last.name != host.ResultEvent || !strings.Contains(string(last.data), `"code":"turn_cancelled"`) {
		t.Fatalf("the stream's result: %s %s", last.name, last.data)
	}
	if out.name != host.OutputEvent || !strings.Contains(string(out.data), `"outcome":"interrupted"`) {
		t.Fatalf("the output before the result: %s %s", out.name, out.data)
	}
}

// A paused turn is cancelled at once: its pending request is given up
// through the provider (what the pause held closes), the session is open
// again, and a decision now has nothing to answer. It works after the
// conversation was evicted too: the provider, re-opened, still held the
// pause, and would otherwise have refused every later turn.
func TestCancelAPausedTurn(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		for _, evicted := range []bool{false, true} {
			f := newFixture(t, config{kind: kind, opt: host.Options{IdleEvict: 1}})
			id := f.open("alice")
			ask := f.askPrompt()
			if kind == onNative {
				ask = "call migrate" // opens a run-scoped workspace, then asks
			}
			r := f.say("alice", id, ask)
			want(t, r, http.StatusAccepted, "")
			pausedRun := r.json(t)["runId"]
			if evicted {
				if n := f.h.EvictIdle(context.Background()); n != 1 {
					t.Fatalf("evicted %d", n)
				}
			}
			r = f.cancel("alice", id)
			want(t, r, http.StatusAccepted, "")
			if m := r.json(t); m["waiting"] != true || m["runId"] != pausedRun {
				t.Fatalf("the cancel's answer: %s", r.body)
			}
			if s := f.do("GET", "/v1/sessions/"+id, "alice", nil).json(t); s["state"] != "open" || s["pending"] != nil {
				t.Fatalf("after the cancel: %v", s)
			}
			last := lastTurn(t, f, "alice", id)
			if last["kind"] != "cancel" || last["outcome"] != host.TurnCancelled || last["runId"] != pausedRun {
				t.Fatalf("the turn log's last entry: %v", last)
			}
			if kind == onNative {
				if open, opened, closed := f.ws.stats(); open != 0 || opened != 1 || closed != 1 {
					t.Fatalf("workspaces after the cancel: %d open, %d opened, %d closed", open, opened, closed)
				}
			}
			want(t, f.decide("alice", id, true), http.StatusConflict, string(host.CodeNoPendingQuestion))
			r = f.say("alice", id, "hello")
			want(t, r, 200, "")
			if out := r.json(t)["output"]; out != f.answer("hello") {
				t.Fatalf("the next turn: %s", r.body)
			}
			f.shutdown()
		}
	})
}

// With no turn running or waiting, a cancel is 409 no_turn; it is a 404
// for anyone but the owner, and a 405 for another method.
func TestCancelWithNoTurn(t *testing.T) {
	f := newFixture(t, config{})
	id := f.open("alice")
	want(t, f.cancel("alice", id), http.StatusConflict, string(host.CodeNoTurn))
	want(t, f.say("alice", id, "hello"), 200, "")
	want(t, f.cancel("alice", id), http.StatusConflict, string(host.CodeNoTurn))
	want(t, f.cancel("bob", id), http.StatusNotFound, string(host.CodeNotFound))
	want(t, f.cancel("alice", "ses_00000000000000000000000000000000"), http.StatusNotFound, string(host.CodeNotFound))
	want(t, f.cancel("alice", "nonsense"), http.StatusNotFound, string(host.CodeNotFound))
	r := f.do("GET", "/v1/sessions/"+id+"/cancel", "alice", nil)
	want(t, r, http.StatusMethodNotAllowed, string(host.CodeMethodNotAllowed))
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow: %q", r.header.Get("Allow"))
	}
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), http.StatusNoContent, "")
	want(t, f.cancel("alice", id), http.StatusConflict, string(host.CodeNoTurn))
	if n := len(turnLog(t, f, "alice", id)); n != 2 { // the turn and the close
		t.Fatalf("%d turn log entries", n)
	}
}

// A close of a conversation a turn is running on cancels the turn (its
// request answers turn_cancelled, the turn log says cancelled), then
// closes it: 204, every tool session closed, the turn log ends closed.
func TestCloseCancelsABusyTurn(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		f := newFixture(t, config{kind: kind, real: true})
		id := f.open("alice")
		held := f.hold("alice", id)
		want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), http.StatusNoContent, "")
		want(t, held.wait(), http.StatusConflict, string(host.CodeTurnCancelled))
		log := turnLog(t, f, "alice", id)
		if len(log) != 2 || log[0]["outcome"] != host.TurnCancelled || !strings.Contains(log[0]["error"].(string), "closing") ||
			log[1]["kind"] != "close" || log[1]["outcome"] != host.TurnClosed {
			t.Fatalf("the turn log: %v", log)
		}
		if s := f.do("GET", "/v1/sessions/"+id, "alice", nil).json(t); s["state"] != "closed" {
			t.Fatalf("after the close: %v", s)
		}
		if kind == onNative {
			if open, opened, closed := f.ws.stats(); open != 0 || opened != closed {
				t.Fatalf("workspaces after the close: %d open, %d opened, %d closed", open, opened, closed)
			}
		}
	})
}

// Replicas: a cancel that lands on a replica not holding the conversation
// is forwarded to the one that does, like a decision, and stops the turn
// there.
func TestReplicasForwardACancel(t *testing.T) {
	dsn := pgDSN(t)
	a, _ := newReplica(t, dsn, nil)
	b, _ := newReplica(t, dsn, a.tokens)
	id := a.open("alice")
	done := make(chan resp, 1)
	go func() { done <- a.say("alice", id, `call gate {}`) }()
	<-a.gate.entered
	r := b.cancel("alice", id)
	want(t, r, http.StatusAccepted, "")
	want(t, <-done, http.StatusConflict, string(host.CodeTurnCancelled))
	if last := lastTurn(t, b, "alice", id); last["outcome"] != host.TurnCancelled {
		t.Fatalf("the turn log's last entry: %v", last)
	}
	want(t, b.cancel("alice", id), http.StatusConflict, string(host.CodeNoTurn))
	want(t, b.cancel("bob", id), http.StatusNotFound, string(host.CodeNotFound))
}
