package host

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/tool"
)

// Defaults of the door's bounds (Options).
const (
	// DefaultBodyMinRate is the slowest a request body may arrive, in
	// bytes a second, averaged over DefaultBodyRateWindow.
	DefaultBodyMinRate = 1024
	// DefaultBodyRateWindow is the window the body rate is judged over.
	DefaultBodyRateWindow = 10 * time.Second
	// DefaultMaxRequestsPerPrincipal bounds one principal's requests in
	// flight at once.
	DefaultMaxRequestsPerPrincipal = 64
	// DefaultMaxCreatesPerMinute is how many conversations a principal
	// may open a minute (a token bucket of that many, refilled at that
	// rate).
	DefaultMaxCreatesPerMinute = 60
)

// errBodyTooSlow is the error reading a request body gives once it
// arrived slower than the floor (Options.BodyMinRate).
var errBodyTooSlow = errors.New("host: the request body arrived slower than the host's floor")

// bodyTooSlow is the answer to a body cut for its rate.
func (h *Host) bodyTooSlow() *apiError {
	return newError(http.StatusRequestTimeout, CodeBodyTooSlow, fmt.Sprintf(
		"host: the request body arrived slower than %d bytes a second over %s, and was cut; send it again over a faster link", h.opt.BodyMinRate, h.opt.BodyRateWindow))
}

// floorBody holds a request body to a minimum rate: each window must
// bring at least rate×window bytes (or the end of the body), or the
// connection's read deadline, set for the end of the window, cuts the
// read. A body of any size is taken if it keeps the pace; a trickle is
// cut within one window whatever its total. The deadline is the
// connection's (wall clock), set only once the handler reads, and
// cleared at the body's end, so a long turn after it is not cut.
type floorBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	hdr    http.Header // the answer's: a cut closes the connection
	quota  int64
	window time.Duration

	armed bool
	got   int64 // bytes this window
	slow  bool
	ended bool // the body's end (or an error) was read
}

// floorBody puts r's body under the rate floor, and returns what to call
// once the request's handler returned.
func (h *Host) floorBody(w http.ResponseWriter, r *http.Request) (finish func()) {
	if h.opt.BodyMinRate < 0 || r.Body == nil || r.Body == http.NoBody {
		return func() {}
	}
	quota := int64(math.Ceil(float64(h.opt.BodyMinRate) * h.opt.BodyRateWindow.Seconds()))
	b := &floorBody{ReadCloser: r.Body, rc: http.NewResponseController(w), hdr: w.Header(), quota: max(quota, 1), window: h.opt.BodyRateWindow}
	r.Body = b
	return b.finish
}

func (b *floorBody) Read(p []byte) (int, error) {
	if b.slow {
		return 0, errBodyTooSlow
	}
	if !b.armed || b.got >= b.quota {
		// A new window: the pace was kept (or this is the first read).
		if err := b.rc.SetReadDeadline(time.Now().Add(b.window)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return 0, err
		}
		b.armed, b.got = true, 0
	}
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The rest of the body is never read: the answer closes the
		// connection rather than let the server wait for it.
		b.slow = true
		b.hdr.Set("Connection", "close")
		return n, errBodyTooSlow
	case err != nil:
		b.ended = true
		b.release()
	}
	return n, err
}

// finish bounds what is left of a body its handler did not read to the
// end: the server reads some of it after the handler, to reuse the
// connection, and that read gets one window too.
func (b *floorBody) finish() {
	if !b.ended && !b.slow {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.window))
	}
}

// release clears the deadline once the body is read: the connection's
// background read that follows must not time out and cancel the
// request's context while its handler works.
func (b *floorBody) release() {
	if b.armed {
		_ = b.rc.SetReadDeadline(time.Time{})
		b.armed = false
	}
}

// releaseBody clears r's body deadline, for a handler done reading a
// body that it did not read to its end.
func releaseBody(r *http.Request) {
	if b, ok := r.Body.(*floorBody); ok {
		b.release()
	}
}

// inflight counts each principal's requests in flight.
type inflight struct {
	max int
	mu  sync.Mutex
	n   map[tool.Identity]int
}

// enter admits one more request of o, or reports that o has max in flight.
func (f *inflight) enter(o tool.Identity) bool {
	if f.max < 0 {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[o] >= f.max {
		return false
	}
	f.n[o]++
	return true
}

func (f *inflight) leave(o tool.Identity) {
	if f.max < 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[o]--; f.n[o] <= 0 {
		delete(f.n, o)
	}
}

// tooManyRequests is the answer past the in-flight bound.
func (h *Host) tooManyRequests(o tool.Identity) *apiError {
	return h.refuse(o, "requests_in_flight", h.opt.MaxRequestsPerPrincipal, 1, CodeTooManyRequests,
		fmt.Sprintf("host: you have %d requests in flight, the most allowed; wait for one to be answered", h.opt.MaxRequestsPerPrincipal))
}

// createBuckets rate-limits conversation creation per principal: a token
// bucket of perMinute tokens, refilled at perMinute a minute, on the
// host's clock. A principal whose bucket is full holds no entry.
type createBuckets struct {
	perMinute int
	now       func() time.Time
	mu        sync.Mutex
	b         map[tool.Identity]bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// take spends one of o's tokens, or says how long until one is there.
func (c *createBuckets) take(o tool.Identity) (ok bool, wait time.Duration) {
	if c.perMinute < 0 {
		return true, 0
	}
	full := float64(c.perMinute)
	perSec := full / 60
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	b, seen := c.b[o]
	if !seen {
		b = bucket{tokens: full, at: now}
	}
	if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = math.Min(full, b.tokens+d*perSec)
	}
	b.at = now
	if b.tokens < 1 {
		c.b[o] = b
		return false, time.Duration((1 - b.tokens) / perSec * float64(time.Second))
	}
	b.tokens--
	c.b[o] = b
	if len(c.b) > 4096 {
		c.prune(now, full, perSec)
	}
	return true, 0
}

// prune drops the buckets that have refilled: they hold nothing a fresh
// one would not, so the map is bounded by the principals active in the
// last minute.
func (c *createBuckets) prune(now time.Time, full, perSec float64) {
	for o, b := range c.b {
		if b.tokens+now.Sub(b.at).Seconds()*perSec >= full {
			delete(c.b, o)
		}
	}
}

// rateLimited is the answer to a creation past the principal's rate.
func (h *Host) rateLimited(o tool.Identity, wait time.Duration) *apiError {
	secs := int(math.Ceil(wait.Seconds()))
	return h.refuse(o, "creation_rate", h.opt.MaxCreatesPerMinute, max(secs, 1), CodeRateLimited,
		fmt.Sprintf("host: you opened %d conversations in the last minute, the most allowed; retry after %d s", h.opt.MaxCreatesPerMinute, max(secs, 1)))
}

// cutForPace reports whether r's body was cut by the rate floor.
func cutForPace(r *http.Request) bool {
	b, ok := r.Body.(*floorBody)
	return ok && b.slow
}
