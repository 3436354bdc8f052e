package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/event"
)

// An agent is untrusted: what it asks of the client is bounded where it
// enters, before the SDK's connection sees it. The connection starts one
// goroutine per request it reads, with no bound, so the bound sits in
// front of it: agentOutput reads the agent's stdout line by line and
// answers a request past the bounds itself, with a JSON-RPC error, and
// the connection never sees it. A request it lets through is counted in
// flight until the connection writes its answer (agentInput sees the
// answer go out). Host tools served over MCP take their slot from the
// same guard.

// maxMessageBytes is the longest message the client reads from an agent:
// the SDK's own limit on one line. A longer one cuts the agent off.
const maxMessageBytes = 10 << 20

// floodWindow and floodFactor define a flood: an agent whose requests
// are refused floodFactor times its bound within floodWindow.
const (
	floodWindow = 10 * time.Second
	floodFactor = 8
)

// DefaultMaxHostClientRequests is Options.MaxClientRequests when zero.
const DefaultMaxHostClientRequests = 1024

// Why a guard cut an agent off, in the agent_cut_off event.
const (
	cutFlood     = "flood"
	cutOversized = "oversized_message"
	cutStalled   = "stalled_input"
)

// codeBusy is the JSON-RPC code of a request refused for capacity: an
// internal error (the request was well formed; the client would not take
// it now).
const codeBusy = -32603

// hostRequests bounds the agents' requests in flight across every session
// of a driver.
type hostRequests struct {
	max int64
	n   atomic.Int64
}

func (h *hostRequests) take() bool {
	for {
		n := h.n.Load()
		if n >= h.max {
			return false
		}
		if h.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (h *hostRequests) give() { h.n.Add(-1) }

// guard holds one agent to its bounds: requests in flight (its own and
// the host's), a flood of refusals, and the cut that stops it.
type guard struct {
	label  string
	limit  int
	host   *hostRequests
	events func(event.Event)
	now    func() time.Time

	mu          sync.Mutex
	inflight    int
	refused     int       // refusals for the agent's own bound in this window
	windowStart time.Time // when the window's first refusal came

	cutOnce sync.Once
	cutCh   chan struct{}
	cause   error // set before cutCh is closed
}

func newGuard(label string, limit int, host *hostRequests, events func(event.Event)) *guard {
	return &guard{label: label, limit: limit, host: host, events: events, now: time.Now, cutCh: make(chan struct{})}
}

// admit takes a slot for one request, or returns the error the agent is
// told. A refusal for the agent's own bound counts toward a flood.
func (g *guard) admit() *sdk.RequestError {
	g.mu.Lock()
	if g.inflight >= g.limit {
		now := g.now()
		if g.refused == 0 || now.Sub(g.windowStart) > floodWindow {
			g.refused, g.windowStart = 0, now
		}
		g.refused++
		refused := g.refused
		g.mu.Unlock()
		if refused >= floodFactor*g.limit {
			g.cut(cutFlood, fmt.Errorf("it sent %d requests past its bound of %d in flight within %s (a flood)", refused, g.limit, floodWindow), refused)
		}
		return &sdk.RequestError{Code: codeBusy, Message: fmt.Sprintf("too many requests in flight: this client serves at most %d at once for one session; wait for an answer before sending more", g.limit),
			Data: map[string]any{"limit": g.limit}}
	}
	if !g.host.take() {
		g.mu.Unlock()
		return &sdk.RequestError{Code: codeBusy, Message: fmt.Sprintf("too many requests in flight on this host (%d across every session); try again shortly", g.host.max),
			Data: map[string]any{"hostLimit": g.host.max}}
	}
	g.inflight++
	g.mu.Unlock()
	return nil
}

// done gives back the slot of a request that was answered.
func (g *guard) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight > 0 {
		g.inflight--
		g.host.give()
	}
}

// cut stops the agent for cause: the first cause is kept and reported;
// the agent process is stopped by whoever watches cutOff.
func (g *guard) cut(reason string, cause error, refused int) {
	g.cutOnce.Do(func() {
		g.cause = cause
		close(g.cutCh)
		if g.events != nil {
			ev := &AgentCutOff{Label: g.label, Reason: reason, Error: cause.Error()}
			if reason == cutFlood {
				ev.Refused, ev.Limit = refused, g.limit
			}
			g.events(event.Event{Type: TypeAgentCutOff, Payload: ev})
		}
	})
}

// cutOff is closed once the agent was cut off.
func (g *guard) cutOff() <-chan struct{} { return g.cutCh }

// why is the cut's cause, nil while there is none.
func (g *guard) why() error {
	select {
	case <-g.cutCh:
		return g.cause
	default:
		return nil
	}
}

// wireMessage is what the client needs of a message from the agent. Its
// fields have the types the SDK's own message has, so a line this decodes
// is one the SDK decodes too: every request let through is answered.
type wireMessage struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      *json.RawMessage  `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Error   *sdk.RequestError `json:"error,omitempty"`
}

// requestID returns the id of a request (a message with an id and a
// method, which the SDK serves on a goroutine of its own), and whether
// line is one.
func requestID(line []byte) (json.RawMessage, bool) {
	var m wireMessage
	if json.Unmarshal(line, &m) != nil || m.ID == nil || m.Method == "" {
		return nil, false
	}
	return *m.ID, true
}

// agentOutput is the agent's stdout as the SDK's connection reads it:
// whole lines, each request past the guard's bounds answered here and
// left out.
type agentOutput struct {
	r   *bufio.Reader
	g   *guard
	in  *agentInput // where refusals are written
	buf []byte      // the line being read
	out []byte      // what is let through and not yet read
	err error       // the end, once reached
}

func newAgentOutput(r io.Reader, g *guard, in *agentInput) *agentOutput {
	return &agentOutput{r: bufio.NewReaderSize(r, 64<<10), g: g, in: in}
}

func (o *agentOutput) Read(p []byte) (int, error) {
	for len(o.out) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		line, err := o.line()
		o.err = err
		if len(line) > 0 && o.pass(line) {
			o.out = line
		}
	}
	n := copy(p, o.out)
	o.out = o.out[n:]
	if len(o.out) == 0 && cap(o.buf) > 1<<20 {
		o.buf = nil // a long message's buffer is not kept
	}
	return n, nil
}

// line reads the next line (with its newline, when there is one).
func (o *agentOutput) line() ([]byte, error) {
	o.buf = o.buf[:0]
	for {
		chunk, err := o.r.ReadSlice('\n')
		if len(o.buf)+len(chunk) > maxMessageBytes {
			cause := fmt.Errorf("it sent a message longer than %d MiB", maxMessageBytes>>20)
			o.g.cut(cutOversized, cause, 0)
			return nil, cause
		}
		o.buf = append(o.buf, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return o.buf, err
		}
	}
}

// pass reports whether line goes on to the connection: everything but a
// request the guard refuses, which is answered here.
func (o *agentOutput) pass(line []byte) bool {
	id, ok := requestID(line)
	if !ok {
		return true
	}
	if rerr := o.g.admit(); rerr != nil {
		_ = o.in.refuse(id, rerr)
		return false
	}
	return true
}

// agentInput is the agent's stdin as the connection writes it: one write
// at a time (the connection's and the refusals), each bounded in time,
// each answer the connection writes giving back its request's slot.
//
// The connection writes each message with one Write, in order, so when
// the write of a session/prompt returns, everything written later — a
// session/cancel — reaches the agent after the prompt.
type agentInput struct {
	w     io.WriteCloser
	g     *guard
	stall time.Duration // how long one write may wait for the agent to read

	writeFailed atomic.Bool // a write failed: the agent's stdin is closed

	mu     sync.Mutex
	broken error
	sent   chan struct{} // closed at the next session/prompt written
}

var (
	promptMethod   = []byte(`"method":"session/prompt"`)
	responsePrefix = []byte(`{"jsonrpc":"2.0","id":`)
)

func (in *agentInput) Write(b []byte) (int, error) {
	if isResponse(b) {
		// The slot comes back before the answer goes out: an agent that
		// sends its next request as soon as it has an answer is never
		// refused for the one it just had answered.
		in.g.done()
	}
	n, err := in.send(b)
	if bytes.Contains(b, promptMethod) {
		in.mu.Lock()
		if in.sent != nil {
			close(in.sent)
			in.sent = nil
		}
		in.mu.Unlock()
	}
	return n, err
}

// expect returns a channel closed when the next prompt has been written.
func (in *agentInput) expect() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	ch := make(chan struct{})
	in.sent = ch
	return ch
}

// refuse answers a request the connection never saw.
func (in *agentInput) refuse(id json.RawMessage, e *sdk.RequestError) error {
	b, err := json.Marshal(struct {
		JSONRPC string            `json:"jsonrpc"`
		ID      json.RawMessage   `json:"id"`
		Error   *sdk.RequestError `json:"error"`
	}{"2.0", id, e})
	if err != nil {
		return err
	}
	_, err = in.send(append(b, '\n'))
	return err
}

// send writes one message. An agent that leaves it unread past the stall
// bound has its stdin closed (a message may be half written: nothing
// more can follow it) and is cut off.
func (in *agentInput) send(b []byte) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.broken != nil {
		return 0, in.broken
	}
	var stalled atomic.Bool
	t := time.AfterFunc(in.stall, func() {
		stalled.Store(true)
		_ = in.w.Close()
	})
	n, err := in.w.Write(b)
	t.Stop()
	if stalled.Load() {
		in.broken = fmt.Errorf("it left what the client sent it unread for %s", in.stall)
		in.g.cut(cutStalled, in.broken, 0)
		return n, in.broken
	}
	if err != nil {
		in.writeFailed.Store(true)
	}
	return n, err
}

// failed reports whether a write to the agent failed: its stdin is
// closed (the agent exited, or closed it).
func (in *agentInput) failed() bool { return in.writeFailed.Load() }

// isResponse reports whether b, a message the connection writes, answers
// a request of the agent's. The connection writes a message's fields in
// one order — jsonrpc, id, method, … — so a message that has an id and
// no method after it is an answer.
func isResponse(b []byte) bool {
	rest, ok := bytes.CutPrefix(b, responsePrefix)
	if !ok {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	var id json.RawMessage
	if dec.Decode(&id) != nil {
		return false
	}
	return !bytes.HasPrefix(rest[dec.InputOffset():], []byte(`,"method"`))
}

// deadline bounds one request the agent made: wait says it waits on a
// person or a command (limits.clientWaitTimeout), else the client serves
// it by itself (limits.clientRequestTimeout). Past it, the request's
// context ends with a cause that says so.
func deadline(ctx context.Context, l Limits, wait bool) (context.Context, context.CancelFunc) {
	d, field := time.Duration(l.ClientRequestTimeout), "clientRequestTimeout"
	if wait {
		d, field = time.Duration(l.ClientWaitTimeout), "clientWaitTimeout"
	}
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("the request took longer than the client allows (limits.%s, %s)", field, d))
}
