package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
)

// events keeps what a guard reports.
type events struct {
	mu  sync.Mutex
	all []event.Event
}

func (e *events) add(ev event.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) cuts() []*AgentCutOff {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*AgentCutOff
	for _, ev := range e.all {
		if ev.Type == TypeAgentCutOff {
			out = append(out, ev.Payload.(*AgentCutOff))
		}
	}
	return out
}

// A flood is 8 times the bound refused within the window; refusals
// spread wider than the window never add up to one. The clock is the
// guard's own.
func TestAFloodIsCountedWithinItsWindow(t *testing.T) {
	t.Parallel()
	var ev events
	now := time.Unix(1_700_000_000, 0)
	g := newGuard("l", 2, &hostRequests{max: 100}, ev.add)
	g.now = func() time.Time { return now }
	for range 2 {
		if err := g.admit(); err != nil {
			t.Fatalf("within the bound: %v", err)
		}
	}
	refuse := func(n int) {
		for range n {
			if g.admit() == nil {
				t.Fatal("a request past the bound was admitted")
			}
		}
	}
	refuse(15) // one short of 8 × 2
	now = now.Add(floodWindow + time.Second)
	refuse(15) // a new window
	if g.why() != nil || len(ev.cuts()) != 0 {
		t.Fatalf("refusals in two windows made a flood: %v", g.why())
	}
	refuse(1) // the 16th in this window
	select {
	case <-g.cutOff():
	default:
		t.Fatal("16 refusals within the window did not cut the agent off")
	}
	cuts := ev.cuts()
	if len(cuts) != 1 || cuts[0].Reason != cutFlood || cuts[0].Refused != 16 || cuts[0].Limit != 2 || !strings.Contains(g.why().Error(), "a flood") {
		t.Fatalf("the cut: %+v, %v", cuts, g.why())
	}
	refuse(40)
	if len(ev.cuts()) != 1 {
		t.Fatal("a cut was reported twice")
	}
	// Answers give slots back, to the host too.
	g.done()
	g.done()
	g.done() // one more than was taken: nothing to give
	if g.inflight != 0 || g.host.n.Load() != 0 {
		t.Fatalf("after the answers: %d in flight, the host holds %d", g.inflight, g.host.n.Load())
	}
}

// The host's bound is shared: a guard refuses once the host is full,
// without counting it toward its own flood.
func TestTheHostBoundIsShared(t *testing.T) {
	t.Parallel()
	host := &hostRequests{max: 3}
	a, b := newGuard("a", 8, host, nil), newGuard("b", 8, host, nil)
	for _, g := range []*guard{a, a, b} {
		if err := g.admit(); err != nil {
			t.Fatal(err)
		}
	}
	err := b.admit()
	if err == nil || err.Code != codeBusy || !strings.Contains(err.Message, "on this host (3 across every session)") {
		t.Fatalf("past the host's bound: %v", err)
	}
	if b.refused != 0 {
		t.Fatal("a refusal for the host's bound counted toward the agent's flood")
	}
	a.done()
	if err := b.admit(); err != nil {
		t.Fatalf("after a slot came back: %v", err)
	}
}

// writeCloser is a buffer with a Close.
type writeCloser struct{ bytes.Buffer }

func (*writeCloser) Close() error { return nil }

func line(s string) string { return s + "\n" }

// agentOutput lets through notifications, answers and what it cannot
// read, and answers a request past the bound itself, with its id.
func TestRefusedRequestsNeverReachTheConnection(t *testing.T) {
	t.Parallel()
	g := newGuard("l", 1, &hostRequests{max: 10}, nil)
	var sent writeCloser
	in := &agentInput{w: &sent, g: g, stall: time.Minute}
	msgs := []string{
		`{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{}}`,
		`{"jsonrpc":"2.0","id":"two","method":"fs/read_text_file","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{}}`,
		`{"jsonrpc":"2.0","id":7,"result":{}}`,
		`not json`,
		`{"jsonrpc":"2.0","id":{"odd":true},"method":"terminal/create"}`,
	}
	var src strings.Builder
	for _, m := range msgs {
		src.WriteString(line(m))
	}
	got, err := io.ReadAll(newAgentOutput(strings.NewReader(src.String()), g, in))
	if err != nil {
		t.Fatal(err)
	}
	want := line(msgs[0]) + line(msgs[2]) + line(msgs[3]) + line(msgs[4])
	if string(got) != want {
		t.Fatalf("let through:\n%s\nwant:\n%s", got, want)
	}
	refusals := strings.Split(strings.TrimSpace(sent.String()), "\n")
	if len(refusals) != 2 {
		t.Fatalf("refusals written: %q", sent.String())
	}
	for i, id := range []string{`"two"`, `{"odd":true}`} {
		var m struct {
			ID    json.RawMessage
			Error sdk.RequestError
		}
		if err := json.Unmarshal([]byte(refusals[i]), &m); err != nil || string(m.ID) != id || m.Error.Code != codeBusy {
			t.Errorf("refusal %d: %s (%v)", i, refusals[i], err)
		}
	}
	if g.inflight != 1 {
		t.Fatalf("%d in flight; want the one request let through (a refusal takes no slot and gives none back)", g.inflight)
	}
}

// A message longer than the limit cuts the agent off; one at the limit
// goes through.
func TestAnOversizedMessageCutsTheAgentOff(t *testing.T) {
	t.Parallel()
	g := newGuard("l", 4, &hostRequests{max: 10}, nil)
	in := &agentInput{w: &writeCloser{}, g: g, stall: time.Minute}
	atLimit := strings.Repeat("x", maxMessageBytes-1) + "\n"
	got, err := io.ReadAll(newAgentOutput(strings.NewReader(atLimit), g, in))
	if err != nil || len(got) != maxMessageBytes || g.why() != nil {
		t.Fatalf("a message at the limit: %d bytes, %v, %v", len(got), err, g.why())
	}
	_, err = io.ReadAll(newAgentOutput(strings.NewReader(atLimit+strings.Repeat("y", maxMessageBytes)+"\n"), g, in))
	if err == nil || !strings.Contains(err.Error(), "longer than 10 MiB") || g.why() == nil {
		t.Fatalf("past the limit: %v, %v", err, g.why())
	}
}

// An agent that leaves its stdin unread past the stall bound is cut off:
// the write ends with an error instead of waiting forever.
func TestAnAgentThatStopsReadingIsCutOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var ev events
		g := newGuard("l", 4, &hostRequests{max: 10}, ev.add)
		r, w := io.Pipe()
		defer r.Close()
		in := &agentInput{w: w, g: g, stall: time.Minute}
		began := time.Now()
		_, err := in.Write([]byte(line(`{"jsonrpc":"2.0","method":"session/cancel","params":{}}`)))
		if err == nil || !strings.Contains(err.Error(), "unread for 1m0s") || time.Since(began) != time.Minute {
			t.Fatalf("a write nobody reads: %v after %s", err, time.Since(began))
		}
		if cuts := ev.cuts(); len(cuts) != 1 || cuts[0].Reason != cutStalled {
			t.Fatalf("cuts: %+v", cuts)
		}
		if _, err := in.Write([]byte("{}\n")); err == nil {
			t.Fatal("a write after the stall went through")
		}
	})
}

// What the SDK's connection writes is told apart the way isResponse
// tells it: its answers to the agent's requests are responses; its own
// requests and notifications are not.
func TestIsResponseReadsWhatTheSDKWrites(t *testing.T) {
	t.Parallel()
	toConn, fromTest := io.Pipe()
	fromConn, toTest := io.Pipe()
	conn := sdk.NewConnection(func(_ context.Context, method string, _ json.RawMessage) (any, *sdk.RequestError) {
		if method == "fail" {
			return nil, sdk.NewInternalError(nil)
		}
		return map[string]string{"ok": "yes"}, nil
	}, toTest, toConn)
	defer fromTest.Close()
	defer fromConn.Close()
	lines := make(chan []byte, 8)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := fromConn.Read(buf)
			if err != nil {
				close(lines)
				return
			}
			lines <- bytes.Clone(buf[:n])
		}
	}()
	for _, req := range []string{`{"jsonrpc":"2.0","id":5,"method":"x"}`, `{"jsonrpc":"2.0","id":"s","method":"fail"}`} {
		if _, err := fromTest.Write([]byte(line(req))); err != nil {
			t.Fatal(err)
		}
		if b := <-lines; !isResponse(b) {
			t.Errorf("the SDK's answer %s is not taken for one", b)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = conn.SendRequestNoResult(ctx, "agent/method", map[string]int{"a": 1}) }()
	if b := <-lines; isResponse(b) {
		t.Errorf("the SDK's request %s is taken for an answer", b)
	}
	cancel()
	if err := conn.SendNotification(context.Background(), "note", nil); err != nil {
		t.Fatal(err)
	}
	for b := range lines {
		if bytes.Contains(b, []byte(`"note"`)) {
			if isResponse(b) {
				t.Errorf("the SDK's notification %s is taken for an answer", b)
			}
			break
		}
	}
}

// echoTools lends one tool that echoes its arguments.
type echoTools struct{}

func (echoTools) Tools() []provider.HostToolSpec {
	return []provider.HostToolSpec{{Name: "echo", Description: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}}
}
func (echoTools) Instructions() *provider.Instructions { return nil }
func (echoTools) Invoke(_ context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
	return provider.HostToolResult{Output: inv.Arguments}, nil
}
func (echoTools) Release(context.Context) error { return errors.New("not yours") }

// A host tool's MCP request takes its slot from the session's guard:
// past the bound it is refused (429) without reaching the tools.
func TestHostToolRequestsShareTheSessionsBound(t *testing.T) {
	t.Parallel()
	g := newGuard("l", 1, &hostRequests{max: 10}, nil)
	l := Limits{ClientWaitTimeout: Duration(time.Minute)}
	h, err := startHostServer(echoTools{}, nil, g, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close(context.Background())
	post := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+h.ln.Addr().String()+hostToolsPath,
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Authorization", "Bearer "+h.door.Load().secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if err := g.admit(); err != nil { // an ACP request holds the one slot
		t.Fatal(err)
	}
	if code, body := post(); code != http.StatusTooManyRequests || !strings.Contains(body, "at most 1 at once for one session") {
		t.Fatalf("past the bound: %d %s", code, body)
	}
	g.done()
	if code, body := post(); code != http.StatusOK {
		t.Fatalf("within the bound: %d %s", code, body)
	}
	if g.inflight != 0 {
		t.Fatalf("the MCP request kept its slot: %d in flight", g.inflight)
	}
}

// sdkMessage is the SDK's own message shape (its fields, tags and order):
// what its connection decodes from an agent and writes back.
type sdkMessage struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      *json.RawMessage  `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  json.RawMessage   `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *sdk.RequestError `json:"error,omitempty"`
}

// requestID takes a line for a request exactly when the SDK would serve
// it as one, with the same id: a request the guard lets through is
// always answered, so its slot always comes back.
func FuzzRequestID(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"path":"a"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"session/update"}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
		`{"jsonrpc":2,"id":1,"method":"m"}`,
		`{"id":1,"method":"m","error":"no"}`,
		`{"ID":1,"METHOD":"m"}`,
		`[1,2]`,
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		id, ok := requestID(line)
		var m sdkMessage
		want := json.Unmarshal(line, &m) == nil && m.ID != nil && m.Method != ""
		if ok != want {
			t.Fatalf("requestID(%q) = %v; the SDK serves it as a request: %v", line, ok, want)
		}
		if ok && !bytes.Equal(id, *m.ID) {
			t.Fatalf("requestID(%q) = %s; the SDK reads id %s", line, id, *m.ID)
		}
	})
}

// isResponse tells the SDK's answers from its requests for any id an
// agent may send, and never panics on anything else.
func FuzzIsResponse(f *testing.F) {
	for _, s := range []struct {
		id     string
		method string
	}{{`1`, ""}, {`"a"`, ""}, {`{"k":[1,"]"]}`, ""}, {`7`, "session/prompt"}, {`"method"`, ""}, {`1e3`, ""}} {
		f.Add([]byte(s.id), s.method)
	}
	f.Fuzz(func(t *testing.T, id []byte, method string) {
		_ = isResponse(id) // anything at all
		id = bytes.TrimSpace(id)
		if !json.Valid(id) || string(id) == "null" {
			return
		}
		raw := json.RawMessage(id)
		m := sdkMessage{JSONRPC: "2.0", ID: &raw, Method: method}
		if method == "" {
			m.Result = json.RawMessage(`null`)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Skip()
		}
		if got := isResponse(append(b, '\n')); got != (method == "") {
			t.Fatalf("isResponse(%s) = %v", b, got)
		}
		m.Result, m.Method = nil, ""
		m.Error = &sdk.RequestError{Code: -1, Message: method}
		b, _ = json.Marshal(m)
		if !isResponse(b) {
			t.Fatalf("isResponse(%s) = false for an error answer", b)
		}
	})
}
