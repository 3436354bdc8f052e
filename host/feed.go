package host

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/tool"
)

// The person's feed: GET /v1/events is one server-sent event stream per
// caller that says, as it happens, what changed in any of the caller's
// conversations (a turn began or ended, a check-in or a question waits, a
// conversation opened or closed). The console follows it instead of
// polling. It carries state, never content: no message, answer or tool
// output goes on it.
//
// Each principal's notices are numbered and the last feedReplay are kept,
// so a client that reconnects with Last-Event-ID is sent what it missed.
// When what it missed is no longer kept (or the id comes from before a
// restart of the host), it is sent a reset event instead and reloads: a
// gap is said, never silent. The feed is this process's: behind several
// replicas, a person's stream hears the conversations its replica serves.

// Feed event names.
const (
	// FeedConversation: a conversation's state changed; data is the
	// conversation as GET /v1/sessions/{id} shows it, plus "running"
	// (true while a turn runs on it).
	FeedConversation = "conversation"
	// FeedInteractions: the questions a conversation waits on changed;
	// data is {"sessionId", "interactions": [...]} (oldest first, empty
	// when none waits).
	FeedInteractions = "interactions"
	// FeedReady opens every stream: data is {"resumed": bool} (whether
	// the notices since Last-Event-ID follow), and its id is the newest
	// notice's, so a reconnect resumes from there.
	FeedReady = "ready"
	// FeedReset: what happened since Last-Event-ID is no longer kept (or
	// the id is not this host's); data is {"reason"}. Reload everything.
	FeedReset = "reset"
)

// Bounds of the feed.
const (
	feedReplay     = 256              // notices kept per principal for reconnects
	feedPrincipals = 4096             // principals with kept notices; the least recently told without a stream is forgotten first
	feedStreams    = 8                // open streams per principal
	feedLife       = 30 * time.Minute // a stream ends after this; the client reconnects with Last-Event-ID
	feedNoticeMax  = 64 << 10         // a notice's data past this is replaced by a reset-worthy stub
)

// notice is one numbered feed event.
type notice struct {
	id   uint64
	name string
	data []byte
}

// feed keeps each principal's recent notices and wakes their streams.
type feed struct {
	mu  sync.Mutex
	seq uint64 // the last id given; ids start at the host's start time in µs, so a restarted host's ids are not an old one's
	of  map[tool.Identity]*principalFeed
}

type principalFeed struct {
	ring    []notice      // oldest first, at most feedReplay
	lost    uint64        // notices up to this id may be missing from ring (dropped, or before it was made)
	wake    chan struct{} // closed (and replaced) on every notice
	streams int
	told    time.Time
}

func newFeed(now time.Time) *feed {
	return &feed{seq: uint64(now.UnixMicro()), of: make(map[tool.Identity]*principalFeed)}
}

// principal returns o's feed, made when missing; with f.mu held.
func (f *feed) principal(o tool.Identity) *principalFeed {
	p := f.of[o]
	if p == nil {
		if len(f.of) >= feedPrincipals {
			f.forgetColdest()
		}
		p = &principalFeed{wake: make(chan struct{}), lost: f.seq}
		f.of[o] = p
	}
	return p
}

// heard reports whether o's notices are kept: o has opened a stream
// since its feed was last forgotten. Notices for anyone else are not made
// (making one is a JSON encoding on every turn of every caller, with no
// stream to send it to); the id such a notice would have had is still
// taken, so that a reconnect from before it is told of the gap.
func (f *feed) heard(o tool.Identity) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.of[o] != nil {
		return true
	}
	f.seq++
	return false
}

// publish numbers v as notice name for principal o and wakes o's streams.
// It never blocks on a stream. Callers skip it when !f.heard(o).
func (f *feed) publish(o tool.Identity, name string, v any, now time.Time) {
	data, err := json.Marshal(v)
	if err != nil || len(data) > feedNoticeMax {
		// Too large to send whole: tell the client to reload instead.
		name, data = FeedReset, []byte(`{"reason":"a change was too large for the feed; reload"}`)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.principal(o)
	f.seq++
	if len(p.ring) >= feedReplay {
		p.lost = p.ring[0].id
		p.ring = append(p.ring[:0], p.ring[1:]...)
	}
	p.ring = append(p.ring, notice{id: f.seq, name: name, data: data})
	p.told = now
	close(p.wake)
	p.wake = make(chan struct{})
}

// forgetColdest drops the principal told least recently that has no
// stream open; with f.mu held. (Its next reconnect gets a reset.)
func (f *feed) forgetColdest() {
	var coldest tool.Identity
	var at time.Time
	found := false
	for o, p := range f.of {
		if p.streams == 0 && (!found || p.told.Before(at)) {
			coldest, at, found = o, p.told, true
		}
	}
	if found {
		delete(f.of, coldest)
	}
}

// open registers a stream of o's, or reports false past feedStreams.
func (f *feed) open(o tool.Identity) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.principal(o)
	if p.streams >= feedStreams {
		return false
	}
	p.streams++
	return true
}

func (f *feed) close(o tool.Identity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.of[o]; p != nil {
		p.streams--
	}
}

// since returns o's notices after id; gap reports that some may be lost
// (no longer kept, or id is not one this feed gave); newest is the last
// id given; wake is closed at o's next notice. o has a stream open (so
// its feed is kept).
func (f *feed) since(o tool.Identity, after uint64) (ns []notice, gap bool, newest uint64, wake <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.principal(o)
	if after != 0 && (after < p.lost || after > f.seq) {
		return nil, true, f.seq, p.wake
	}
	for _, n := range p.ring {
		if n.id > after {
			ns = append(ns, n)
		}
	}
	return ns, false, f.seq, p.wake
}

// handleEvents serves GET /v1/events: the caller's feed.
func (h *Host) handleEvents(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	var after uint64
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, fieldError(CodeInvalidField, "Last-Event-ID", "host: Last-Event-ID is not an id this feed sent; reconnect without it and reload"))
			return
		}
		after = n
	}
	if !h.feed.open(o) {
		e := newError(http.StatusTooManyRequests, CodeTooManyStreams, "host: you have "+strconv.Itoa(feedStreams)+" event streams open, the most allowed; close a console tab")
		e.retryAfter = 5
		writeError(w, e)
		return
	}
	defer h.feed.close(o)

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 16<<10)
	flush := func() bool { return bw.Flush() == nil && rc.Flush() == nil }

	ns, gap, newest, wake := h.feed.since(o, after)
	switch {
	case gap:
		writeSSE(bw, strconv.FormatUint(newest, 10), FeedReset, map[string]string{"reason": "the changes since your last event are no longer kept; reload"})
		ns, after = nil, newest
	case after == 0:
		// Nothing to resume: the client has just loaded; it hears what
		// changes from now.
		writeSSE(bw, strconv.FormatUint(newest, 10), FeedReady, map[string]bool{"resumed": false})
		ns, after = nil, newest
	default:
		writeSSE(bw, "", FeedReady, map[string]bool{"resumed": true})
	}
	life := time.NewTimer(feedLife)
	defer life.Stop()
	var keepAlive <-chan time.Time
	if h.opt.KeepAlive > 0 {
		tk := time.NewTicker(h.opt.KeepAlive)
		defer tk.Stop()
		keepAlive = tk.C
	}
	for {
		for _, n := range ns {
			writeNotice(bw, n)
			after = n.id
		}
		if !flush() {
			return
		}
		select {
		case <-wake:
			ns, gap, newest, wake = h.feed.since(o, after)
			if gap {
				writeSSE(bw, strconv.FormatUint(newest, 10), FeedReset, map[string]string{"reason": "changes were lost; reload"})
				ns, after = nil, newest
			}
		case <-keepAlive:
			bw.WriteString(": keep-alive\n\n")
			ns = nil
		case <-h.drained:
			return // the host is shutting down: the client reconnects elsewhere or later
		case <-life.C:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func writeNotice(bw *bufio.Writer, n notice) {
	bw.WriteString("id: ")
	bw.WriteString(strconv.FormatUint(n.id, 10))
	bw.WriteString("\nevent: ")
	bw.WriteString(n.name)
	bw.WriteString("\ndata: ")
	bw.Write(n.data)
	bw.WriteString("\n\n")
}

// feedView is a conversation as the feed tells it.
type feedView struct {
	sessionView
	Running bool `json:"running"`
}

// tellConversation puts lc's state on its owner's feed. The caller holds
// lc (busy) or lc is not shared.
func (h *Host) tellConversation(lc *liveConv, running bool) {
	if !h.feed.heard(lc.owner) {
		return
	}
	v := feedView{sessionView: viewOf(lc.conv), Running: running}
	if qs := h.askingViews(lc.id); len(qs) > 0 {
		v.Interaction, v.Interactions = &qs[0], qs
	}
	h.feed.publish(lc.owner, FeedConversation, v, h.now())
}

// tellInteractions puts the questions conversation id waits on on its
// owner's feed.
func (h *Host) tellInteractions(o tool.Identity, id string) {
	if !h.feed.heard(o) {
		return
	}
	qs := h.askingViews(id)
	if qs == nil {
		qs = []InteractionView{}
	}
	h.feed.publish(o, FeedInteractions, map[string]any{"sessionId": id, "interactions": qs}, h.now())
}
