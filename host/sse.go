package host

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
)

// ResultEvent is the SSE event name of a turn's last message: its data is
// the JSON the turn would have answered ({"output","runId"},
// {"awaiting","runId"} or {"error"}).
const ResultEvent = "result"

// DroppedEvent names an SSE event saying that n events of the turn were
// dropped because the client read too slowly: {"dropped": n}.
const DroppedEvent = "dropped"

// stream runs the turn while writing its events as server-sent events, in
// the order the engine emitted them, and ends with the result once it is
// saved. The turn does not depend on the client: if it goes away, the turn
// still finishes and is saved.
func (h *Host) stream(w http.ResponseWriter, r *http.Request, lc *liveConv, kind string, start time.Time, turnCtx context.Context, run func() (agent.Result, error)) {
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
		res    agent.Result
		runErr error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		res, runErr = run()
	}()

	var buf []event.Event
	var lastSeq uint64
	pump := func() {
		var dropped int
		buf, dropped = sub.take(buf)
		// Parallel tool calls may hand events over slightly out of turn;
		// the bus numbered them, so restore its order.
		slices.SortStableFunc(buf, func(a, b event.Event) int {
			switch {
			case a.Meta.Seq < b.Meta.Seq:
				return -1
			case a.Meta.Seq > b.Meta.Seq:
				return 1
			}
			return 0
		})
		if dropped > 0 && alive {
			writeSSE(bw, "", DroppedEvent, map[string]int{"dropped": dropped})
		}
		for _, e := range buf {
			if !alive {
				break
			}
			if e.Meta.Seq <= lastSeq && lastSeq != 0 {
				// Never go backwards: an event that arrived after a later one
				// was sent goes out with no id.
				writeSSE(bw, "", string(e.Type), e)
				continue
			}
			lastSeq = e.Meta.Seq
			writeSSE(bw, strconv.FormatUint(e.Meta.Seq, 10), string(e.Type), e)
		}
		flush()
	}
	var keepAlive <-chan time.Time
	if h.opt.KeepAlive > 0 {
		t := time.NewTicker(h.opt.KeepAlive)
		defer t.Stop()
		keepAlive = t.C
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
	status, out := h.settle(r, lc, kind, start, turnCtx, res, runErr)
	pump() // what the turn and its settling emitted, all exported by now
	if !alive {
		return
	}
	if out.Error != nil {
		writeSSE(bw, "", ResultEvent, struct {
			Error *apiError `json:"error"`
		}{out.Error})
	} else {
		_ = status
		writeSSE(bw, "", ResultEvent, out)
	}
	flush()
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
