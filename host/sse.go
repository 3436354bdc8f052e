package host

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
)

// ResultEvent is the SSE event name of a turn's last message: its data is
// the JSON the turn would have answered ({"output","runId"},
// {"awaiting","runId"} or {"error"}).
const ResultEvent = "result"

// OutputEvent is the SSE event name of one provider output of the turn:
// its data is {"kind","text","request","outcome"} (kind is turn.started,
// text, activity, request or turn.completed). Any provider's stream has
// these; a provider may also send events of its own (agentry.*) around
// them.
const OutputEvent = "output"

// InteractionEvent is the SSE event name of a session interaction raised
// while the stream is open: its data is the interaction as GET
// /v1/sessions/{id} shows it.
const InteractionEvent = "interaction"

// DroppedEvent names an SSE event saying that n events of the turn were
// dropped because the client read too slowly: {"dropped": n}.
const DroppedEvent = "dropped"

// outputView is a provider output as a stream shows it.
type outputView struct {
	Kind    provider.OutputKind `json:"kind"`
	Text    string              `json:"text,omitempty"`
	Request *requestView        `json:"request,omitempty"`
	Outcome provider.Outcome    `json:"outcome,omitempty"`
}

type requestView struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Prompt string `json:"prompt"`
	Tool   string `json:"tool,omitempty"`
}

func viewOutput(o provider.Output) outputView {
	v := outputView{Kind: o.Kind, Text: o.Text, Outcome: o.Outcome}
	if o.Request != nil {
		v.Request = &requestView{ID: o.Request.ID, Kind: string(o.Request.Kind), Prompt: o.Request.Prompt, Tool: o.Request.Tool}
	}
	return v
}

// stream runs the turn while writing its events and outputs as
// server-sent events, in the order they came, and ends with the result
// once it is saved. The turn does not depend on the client: if it goes
// away, the turn still finishes and is saved.
func (h *Host) stream(w http.ResponseWriter, r *http.Request, lc *liveConv, stop context.Context, began time.Time, start func(context.Context, *liveConv) *turnRun) {
	sub := h.router.subscribe(lc.id)
	defer h.router.unsubscribe(lc.id, sub)

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 16<<10)
	alive := true
	flush := func() {
		if !alive {
			return
		}
		if bw.Flush() != nil || rc.Flush() != nil {
			alive = false
		}
	}
	flush()

	var (
		t    *turnRun
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		t = h.drive(stop, lc, start, sub.pushOutput)
	}()

	var buf []item
	var lastSeq uint64
	pump := func() {
		var dropped int
		buf, dropped = sub.take(buf)
		sortEvents(buf)
		if dropped > 0 && alive {
			writeSSE(bw, "", DroppedEvent, map[string]int{"dropped": dropped})
		}
		for _, it := range buf {
			if !alive {
				break
			}
			switch {
			case it.output != nil:
				writeSSE(bw, "", OutputEvent, viewOutput(*it.output))
			case it.interaction != nil:
				writeSSE(bw, "", InteractionEvent, it.interaction)
			case it.e.Meta.Seq <= lastSeq && lastSeq != 0:
				// Never go backwards: an event that arrived after a later one
				// was sent goes out with no id.
				writeSSE(bw, "", string(it.e.Type), it.e)
			default:
				lastSeq = it.e.Meta.Seq
				writeSSE(bw, strconv.FormatUint(it.e.Meta.Seq, 10), string(it.e.Type), it.e)
			}
		}
		flush()
	}
	var keepAlive <-chan time.Time
	if h.opt.KeepAlive > 0 {
		tk := time.NewTicker(h.opt.KeepAlive)
		defer tk.Stop()
		keepAlive = tk.C
	}
	for running := true; running; {
		select {
		case <-sub.ready:
			pump()
		case <-keepAlive:
			if alive {
				bw.WriteString(": keep-alive\n\n") // a comment: clients ignore it
				flush()
			}
		case <-done:
			running = false
		}
	}
	_, out := h.settle(r, lc, t, stop, began)
	pump() // what the turn and its settling emitted, all exported by now
	if !alive {
		return
	}
	if out.Error != nil {
		writeSSE(bw, "", ResultEvent, struct {
			Error *apiError `json:"error"`
		}{out.Error})
	} else {
		writeSSE(bw, "", ResultEvent, out)
	}
	flush()
}

// sortEvents puts the bus events of a batch back in the order the bus
// numbered them (parallel tool calls may hand them over slightly out of
// turn), leaving outputs and interactions where they are.
func sortEvents(buf []item) {
	var at []int
	var evs []event.Event
	for i, it := range buf {
		if it.output == nil && it.interaction == nil {
			at = append(at, i)
			evs = append(evs, it.e)
		}
	}
	slices.SortStableFunc(evs, func(a, b event.Event) int { return cmp.Compare(a.Meta.Seq, b.Meta.Seq) })
	for k, i := range at {
		buf[i].e = evs[k]
	}
}

func writeSSE(bw *bufio.Writer, id, name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"code":"internal","message":"host: an event could not be encoded"}}`)
	}
	if id != "" {
		bw.WriteString("id: ")
		bw.WriteString(id)
		bw.WriteByte('\n')
	}
	bw.WriteString("event: ")
	bw.WriteString(name)
	bw.WriteString("\ndata: ")
	bw.Write(b)
	bw.WriteString("\n\n")
}
