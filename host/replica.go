package host

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// DefaultLeaseTTL is how long a conversation's ownership lease lasts
// unrenewed; a replica renews the leases it holds every third of it.
const DefaultLeaseTTL = 15 * time.Second

// ForwardedHeader marks a request one replica forwarded to the replica
// holding the conversation; its value is the forwarding replica's id. A
// replica that receives a forwarded request answers it and never
// forwards it again.
const ForwardedHeader = "Agentry-Forwarded-By"

// ForwardIDHeader carries the id a forwarding replica gave a forwarded
// request ("fwd-" and 32 hex digits). The holder records it with the
// turn the request begins (Store.BeginTurn); a forwarder that gives up
// waiting voids it first (Store.VoidForward), so a request its caller
// was told to send again never runs late.
const ForwardIDHeader = "Agentry-Forward-Id"

// DefaultForwardTimeout bounds how long a replica forwarding a request
// waits for a holder that stopped answering before it answers 503
// replica_unavailable. A holder that answers its health probe is waited
// for however long its turn takes.
const DefaultForwardTimeout = 5 * time.Second

// Leases is how replicas sharing one store agree on which of them holds
// each conversation's live provider session. A conversation is owned by
// the replica holding its lease; the lease names the address the others
// reach that replica at, and lasts [Leases.TTL] unless renewed. Taking a
// lease is atomic in the store: at any moment at most one replica holds a
// live lease on a conversation. Implementations must be safe for
// concurrent use; host/sqlstore has the PostgreSQL one (Store.Leases). A
// host with no Leases (Options.Leases nil, as with SQLite) is the only
// replica and owns everything.
type Leases interface {
	// Replica is who this replica is.
	Replica() Replica
	// TTL is how long a lease lasts unrenewed.
	TTL() time.Duration
	// Claim takes the lease of conversation id for this replica, or
	// renews it, when the conversation is owner's, is not closed, and no
	// other replica holds a live lease on it. Otherwise Claim.Held is
	// false and Claim.Holder names the replica holding it, if one does.
	Claim(ctx context.Context, owner tool.Identity, id string) (Claim, error)
	// Holder returns the replica holding a live lease on the
	// conversation, or the zero Holder when none does.
	Holder(ctx context.Context, id string) (Holder, error)
	// Renew extends this replica's leases of ids and returns the ids it
	// still holds (a lease that lapsed may have been taken by another).
	Renew(ctx context.Context, ids []string) ([]string, error)
	// Release gives up this replica's leases of ids.
	Release(ctx context.Context, ids []string) error
}

// Replica names one `agentry serve` process among those sharing a store.
type Replica struct {
	// ID is unique per process (a new one each start).
	ID string
	// Address is the base URL the other replicas reach it at.
	Address string
}

// Holder is the replica holding a live lease.
type Holder struct {
	Replica
	// Left is how long the lease has to run unless it is renewed.
	Left time.Duration
}

// Claim is what [Leases.Claim] found.
type Claim struct {
	// Held: this replica holds the lease.
	Held bool
	// Epoch identifies the holding: it changes whenever the lease is
	// taken afresh (never repeats), and stays the same across renewals.
	Epoch int64
	// TakenFrom is set when the lease was taken over from a replica whose
	// lease had lapsed (it stopped renewing it: it died or lost the
	// store): that replica's id. Empty when the lease was free (never
	// held, or released cleanly).
	TakenFrom string
	// Holder is, when Held is false, the replica holding a live lease;
	// zero when none does (no such conversation for this owner, or it is
	// closed).
	Holder Holder
}

// ParseReplicaURL checks the address a replica is reached at (agentry
// serve --advertise): an absolute http or https URL naming a host, with
// no user, query or fragment.
func ParseReplicaURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("host: the replica address %s is not a URL; give one such as http://10.0.0.5:8080", quoteAddress(s, nil))
	}
	q := quoteAddress(s, u)
	switch {
	case u.User != nil:
		return nil, errors.New("host: the replica address must not carry a user or password: replicas forward the caller's own credentials")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("host: the replica address %s must start with http:// or https://", q)
	case u.Opaque != "":
		return nil, fmt.Errorf("host: the replica address %s is not a hierarchical URL; give one such as http://10.0.0.5:8080", q)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("host: the replica address %s names no host; give one such as http://10.0.0.5:8080", q)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		return nil, fmt.Errorf("host: the replica address %s must not have a query or fragment", q)
	}
	if p := u.Port(); p != "" {
		if n, err := net.LookupPort("tcp", p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("host: the replica address %s has an invalid port", q)
		}
	}
	return u, nil
}

// quoteAddress quotes an address for an error, never with what could be
// a password in it.
func quoteAddress(s string, u *url.URL) string {
	if strings.Contains(s, "@") {
		if u != nil && u.User == nil && !strings.Contains(u.Host, "@") {
			return strconv.Quote(s)
		}
		return "(not shown: it has an @)"
	}
	return strconv.Quote(s)
}

// The note the model gets, as the context of the first turn after a
// takeover from a replica that stopped answering (never inside the
// person's message). It starts with a marker so a reader of the agent's
// record can tell it from the person's words.
const takeoverNote = "[agentry: this conversation was taken over by another replica because the one holding it stopped answering. " +
	"What lived only in that replica's memory is gone: interpreter variables, running processes, files in its sandbox. " +
	"The conversation so far is intact; redo whatever you need from before the next message.]"

// TurnTakenOver is the turn-log outcome of a takeover (kind "takeover"):
// the replica holding the conversation stopped renewing its lease, and
// this one took it over; the live state was lost.
const TurnTakenOver = "taken_over"

// replicas is the host's side of running among several: the leases it
// holds (cached, so a request on the owner asks the store nothing), the
// heartbeat that renews them, and the reverse proxy to the others.
type replicas struct {
	h     *Host
	l     Leases
	self  Replica
	ttl   time.Duration
	trust time.Duration // how long after a renewal began its lease is surely ours
	tr    *http.Transport
	proxy *httputil.ReverseProxy

	forwarded *prometheus.CounterVec // outcome
	takeovers prometheus.Counter

	forwardTimeout time.Duration

	mu     sync.Mutex
	held   map[string]*heldLease
	note   map[string]string     // taken over from a dead replica: what to tell the model at the next turn
	stale  map[string]bool       // lost while a request held it: closed at a later beat
	fences map[string]*turnFence // the turns running here, by conversation

	stop chan struct{}
	done chan struct{}
}

type heldLease struct {
	epoch int64
	until time.Time // monotonic: held surely until then
}

type forwardKey struct{}

type forwardTo struct {
	url    *url.URL
	holder Holder
	body   []byte // the caller's body, read whole; nil when it sent none
	// A turn or a decision: it begins a turn on the holder, under the id
	// forward, which is voided if this replica gives up waiting.
	turn    bool
	owner   tool.Identity
	conv    string
	forward string
}

func newReplicas(h *Host, l Leases) (*replicas, error) {
	self, ttl := l.Replica(), l.TTL()
	if self.ID == "" {
		return nil, errors.New("host: Options.Leases names no replica id")
	}
	if _, err := ParseReplicaURL(self.Address); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, errors.New("host: Options.Leases has no lease duration")
	}
	switch {
	case h.opt.ForwardTimeout < 0:
		return nil, errors.New("host: Options.ForwardTimeout must not be negative; use 0 for the default")
	case h.opt.ForwardTimeout == 0:
		h.opt.ForwardTimeout = DefaultForwardTimeout
	}
	r := &replicas{
		h: h, l: l, self: self, ttl: ttl, trust: ttl - ttl/10, forwardTimeout: h.opt.ForwardTimeout,
		held: make(map[string]*heldLease), note: make(map[string]string), stale: make(map[string]bool), fences: make(map[string]*turnFence),
		stop: make(chan struct{}), done: make(chan struct{}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentry_host_forwarded_total",
			Help: "Requests forwarded to the replica holding their conversation, by outcome (sent, unreachable, moved).",
		}, []string{"outcome"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentry_host_takeovers_total",
			Help: "Conversations taken over from a replica whose lease lapsed.",
		}),
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "agentry_host_leases_held",
		Help: "Conversation leases this replica holds.",
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(len(r.held))
	})
	for _, c := range []prometheus.Collector{r.forwarded, r.takeovers, held} {
		if err := h.metrics.reg.Register(c); err != nil {
			return nil, fmt.Errorf("host: registering the replica metrics: %w", err)
		}
	}
	r.tr = &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	r.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			to := pr.In.Context().Value(forwardKey{}).(forwardTo)
			pr.SetURL(to.url)
			pr.SetXForwarded()
			// The caller's Authorization goes through untouched: the owner
			// proves the caller again.
			pr.Out.Header.Set(ForwardedHeader, self.ID)
			pr.Out.Header.Del(ForwardIDHeader)
			if to.forward != "" {
				pr.Out.Header.Set(ForwardIDHeader, to.forward)
			}
			if to.body != nil {
				sendFromMemory(pr.Out, to.body)
			}
		},
		Transport:     watched{r},
		FlushInterval: -1, // SSE streams through as it is written
		ErrorLog:      slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		ErrorHandler:  r.unreachable,
	}
	go r.beat()
	return r, nil
}

// route sends a request for a conversation another replica holds to that
// replica, and reports whether it did (or answered it). A turn, a decision,
// a cancel and a close claim the lease (taking it when it is free or
// lapsed); a read of the conversation only looks at who holds it; a read
// of its turn log takes a lease nobody holds when a turn was left in
// flight, to record how it ended. Anything else is answered here. A
// forwarded request served here comes back with its forwarder's id in its
// context.
func (r *replicas) route(w http.ResponseWriter, req *http.Request, o tool.Identity) (*http.Request, bool) {
	claim := false
	switch req.Pattern {
	case "POST /v1/sessions/{id}/turns", "POST /v1/sessions/{id}/decision", "POST /v1/sessions/{id}/cancel", "DELETE /v1/sessions/{id}":
		claim = true
	case "GET /v1/sessions/{id}":
	case "GET /v1/sessions/{id}/turns":
		r.settleLeftInFlight(req.Context(), o, req.PathValue("id"))
		return req, false
	default:
		return req, false
	}
	return r.routeTo(w, req, o, req.PathValue("id"), claim)
}

// routeTo forwards the request to the replica holding conversation id of
// owner o, claiming its lease first when claim is set (a request that
// changes it); it reports whether it answered, and returns the request to
// serve here otherwise (with its forwarder's id, when it was forwarded).
func (r *replicas) routeTo(w http.ResponseWriter, req *http.Request, o tool.Identity, id string, claim bool) (*http.Request, bool) {
	if !validSessionID(id) {
		return req, false
	}
	ctx, cancel := context.WithTimeout(req.Context(), r.ttl/3)
	defer cancel()
	var holder Holder
	if claim {
		c, fresh, err := r.claim(ctx, o, id)
		if err != nil {
			writeError(w, r.h.storeError(err))
			return req, true
		}
		if c.Held {
			if fresh {
				r.h.tookOver(ctx, o, id, c)
			}
			return withForwardID(req), false
		}
		holder = c.Holder
	} else {
		if r.holds(id) {
			return req, false
		}
		var err error
		if holder, err = r.l.Holder(ctx, id); err != nil {
			writeError(w, r.h.storeError(err))
			return req, true
		}
	}
	if holder.ID == "" || holder.ID == r.self.ID {
		return req, false // nobody holds it: answered here (not found, closed, or read from the store)
	}
	r.forward(w, req, o, holder)
	return req, true
}

// withForwardID puts the id a forwarder gave the request in its context.
func withForwardID(req *http.Request) *http.Request {
	id := req.Header.Get(ForwardIDHeader)
	if req.Header.Get(ForwardedHeader) == "" || !validForwardID(id) {
		return req
	}
	return req.WithContext(context.WithValue(req.Context(), forwardIDKey{}, id))
}

// newForwardID returns "fwd-" and 32 hex digits (128 random bits).
func newForwardID() string { return newID("fwd-") }

func validForwardID(id string) bool { return validID(id, "fwd-") }

// settleLeftInFlight records the turn a replica left in flight on a
// conversation nobody holds now (it stopped, and no request has come for
// the conversation since): the reader of its turn log then sees how that
// turn ended. It takes the lease to do so, as a request would.
func (r *replicas) settleLeftInFlight(ctx context.Context, o tool.Identity, id string) {
	if !validSessionID(id) || r.holds(id) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.ttl/3)
	defer cancel()
	if h, err := r.l.Holder(ctx, id); err != nil || h.ID != "" {
		return // held (by one that records its own turns), or not known now
	}
	if c, err := r.h.store.Info(ctx, o, id); err != nil || c.Begun == nil || c.State == StateClosed {
		return
	}
	if c, fresh, err := r.claim(ctx, o, id); err == nil && c.Held && fresh {
		r.h.tookOver(ctx, o, id, c)
	}
}

// holds reports whether this replica surely holds the conversation's
// lease now.
func (r *replicas) holds(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	hl := r.held[id]
	return hl != nil && time.Now().Before(hl.until)
}

// claim takes or renews the lease; fresh reports a holding this replica
// did not have before (so whatever it kept of the conversation may be
// stale).
func (r *replicas) claim(ctx context.Context, o tool.Identity, id string) (c Claim, fresh bool, err error) {
	start := time.Now()
	r.mu.Lock()
	if hl := r.held[id]; hl != nil && start.Before(hl.until) {
		r.mu.Unlock()
		return Claim{Held: true, Epoch: hl.epoch}, false, nil
	}
	r.mu.Unlock()
	c, err = r.l.Claim(ctx, o, id)
	if err != nil || !c.Held {
		return c, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	hl := r.held[id]
	fresh = hl == nil || hl.epoch != c.Epoch
	r.held[id] = &heldLease{epoch: c.Epoch, until: start.Add(r.trust)}
	if fresh {
		delete(r.stale, id)
		if c.TakenFrom != "" {
			r.note[id] = takeoverNote
		}
	}
	if !fresh {
		c.TakenFrom = "" // told once, when it was taken
	}
	return c, fresh, nil
}

// forward proxies the request to the holder; a forwarded request that
// lands on a replica not holding the conversation is answered, never sent
// on again.
func (r *replicas) forward(w http.ResponseWriter, req *http.Request, o tool.Identity, holder Holder) {
	if req.Header.Get(ForwardedHeader) != "" {
		r.forwarded.WithLabelValues("moved").Inc()
		e := newError(http.StatusServiceUnavailable, CodeSessionMoved,
			"host: this session moved to another replica while the request was on its way; send it again")
		e.retryAfter = 1
		writeError(w, e)
		return
	}
	u, err := ParseReplicaURL(holder.Address)
	if err != nil {
		r.h.log.Error("host: the replica holding a session advertises an address that is not usable", "replica", holder.ID, "err", err)
		r.forwarded.WithLabelValues("unreachable").Inc()
		writeError(w, unreachableError(holder.Left))
		return
	}
	to := forwardTo{url: u, holder: holder, owner: o, conv: req.PathValue("id")}
	if req.Pattern == "POST /v1/sessions/{id}/turns" || req.Pattern == "POST /v1/sessions/{id}/decision" {
		to.turn, to.forward = true, newForwardID() // it begins a turn there
	}
	if req.ContentLength != 0 { // a body, of known length or not
		b, ae := r.h.readCapped(w, req)
		if ae != nil {
			writeError(w, ae)
			return
		}
		to.body = b
	}
	// A holder that missed a renewal may have stopped: it must answer a
	// probe before anything is sent to it.
	if holder.Left < r.ttl/2 && !r.alive(req.Context(), u, r.forwardTimeout/2) {
		r.forwarded.WithLabelValues("unreachable").Inc()
		writeError(w, unreachableError(holder.Left))
		return
	}
	r.forwarded.WithLabelValues("sent").Inc()
	ctx := context.WithValue(req.Context(), forwardKey{}, to)
	r.proxy.ServeHTTP(w, req.WithContext(ctx))
}

// sendFromMemory makes the forwarded request carry the caller's body from
// memory instead of from the caller's connection.
//
// Handing the inbound body to the Transport races with net/http's server:
// the Transport writes the body on a goroutine of its own, and after the
// last byte it reads the body once more (to see its end) and closes it.
// The owner may answer in between — an event stream answers as soon as
// it has read the message — and the proxy then writes the answer's
// header here, at which point the server, taking the inbound body for
// unread, drains and closes it. The Transport's last read then fails
// ("invalid Read on closed Body"), and a failed body read makes it close
// its connection to the owner: the stream was cut mid-turn, on this side,
// while the owner went on running the turn. Every API body is small and
// capped (Options.MaxBodyBytes), so it is read whole before forwarding.
//
// GetBody lets the Transport resend a request that it wrote not one byte
// of (a kept-alive connection the owner had closed); a request the owner
// may have seen is never resent, so a turn is never run twice.
func sendFromMemory(out *http.Request, b []byte) {
	out.ContentLength = int64(len(b))
	out.TransferEncoding = nil
	out.Header.Del("Expect") // the body is here already: no need to ask the owner first
	out.GetBody = func() (io.ReadCloser, error) {
		if len(b) == 0 {
			return http.NoBody, nil
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	out.Body, _ = out.GetBody()
}

// unreachable answers a forwarded request whose holder did not answer.
func (r *replicas) unreachable(w http.ResponseWriter, req *http.Request, err error) {
	to, _ := req.Context().Value(forwardKey{}).(forwardTo)
	if req.Context().Err() != nil {
		return // the caller left; nobody to answer
	}
	r.forwarded.WithLabelValues("unreachable").Inc()
	r.h.log.Warn("host: the replica holding a session did not answer a forwarded request", "replica", to.holder.ID, "err", err)
	writeError(w, r.giveUp(req.Context(), to))
}

// watched is the forwarding transport: while it waits for the holder's
// answer (its headers: a stream's come at once, a JSON turn's when the
// turn ends), it checks that the holder is alive every quarter of the
// forward timeout, giving each probe half of it, and gives up when one
// goes unanswered; so a frozen or cut-off holder is answered for within
// the forward timeout (with room for voiding the request), and a busy
// one is waited for however long its turn takes.
type watched struct{ r *replicas }

// errHolderSilent is why a forwarded request was given up.
var errHolderSilent = errors.New("host: the replica holding the session stopped answering")

func (wt watched) RoundTrip(req *http.Request) (*http.Response, error) {
	r := wt.r
	to, _ := req.Context().Value(forwardKey{}).(forwardTo)
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := make(chan struct{})
	if to.url != nil {
		go r.watch(ctx, cancel, stop, to.url)
	}
	res, err := r.tr.RoundTrip(req.WithContext(ctx))
	close(stop)
	if err != nil {
		cancel(err)
		if errors.Is(context.Cause(ctx), errHolderSilent) {
			err = errHolderSilent
		}
		return nil, err
	}
	res.Body = &closeCancels{ReadCloser: res.Body, cancel: cancel} // the answer streams on under ctx
	return res, nil
}

// closeCancels ends the forwarded request's context with its body.
type closeCancels struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *closeCancels) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// watch probes the holder at u until stop, and cancels the forwarded
// request when it does not answer.
func (r *replicas) watch(ctx context.Context, cancel context.CancelCauseFunc, stop <-chan struct{}, u *url.URL) {
	every := r.forwardTimeout / 4
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !r.alive(ctx, u, r.forwardTimeout/2) {
			cancel(errHolderSilent)
			return
		}
		t.Reset(every)
	}
}

// alive reports whether the replica at u answers its health check within
// wait.
func (r *replicas) alive(ctx context.Context, u *url.URL, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	probe := *u
	probe.Path = strings.TrimSuffix(probe.Path, "/") + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probe.String(), nil)
	if err != nil {
		return false
	}
	res, err := r.tr.RoundTrip(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// giveUp answers a forwarded request the holder did not answer. A turn or
// a decision is voided first, so it never runs there late: then the
// caller may send it again once the holder's lease lapses (503
// replica_unavailable, Retry-After). One that had begun there may have run
// in part, and is not to be sent again blindly (turn_lost).
func (r *replicas) giveUp(ctx context.Context, to forwardTo) *apiError {
	if !to.turn || to.forward == "" {
		return unreachableError(to.holder.Left)
	}
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl/3)
	defer cancel()
	began, err := r.h.store.VoidForward(vctx, to.owner, to.conv, to.forward)
	switch {
	case err != nil:
		r.h.log.Error("host: giving up a forwarded request the holder did not answer", "session", to.conv, "err", err)
		return newError(http.StatusServiceUnavailable, CodeReplicaUnavailable,
			"host: the replica holding this session stopped answering, and whether it began the request could not be recorded; "+
				"read GET /v1/sessions/{id}/turns before sending it again")
	case began:
		e := turnLostError()
		e.Message = "host: the turn began on the replica holding this session, which then stopped answering; " +
			"it may have run in part, and may still end there: read GET /v1/sessions/{id}/turns before sending it again"
		return e
	}
	return unreachableError(to.holder.Left)
}

func unreachableError(left time.Duration) *apiError {
	secs := max(1, int(math.Ceil(left.Seconds())))
	e := newError(http.StatusServiceUnavailable, CodeReplicaUnavailable,
		fmt.Sprintf("host: the replica holding this session cannot be reached; if it has stopped, another replica takes the session over once its lease lapses (within %ds); retry then", secs))
	e.retryAfter = secs
	return e
}

// tookOver settles what a fresh lease means: a turn another replica left
// in flight is recorded (settleOrphan); whatever this replica kept of the
// conversation is dropped unless the store shows nobody changed it
// meanwhile; a takeover from a replica that stopped answering is written
// to the turn log (and the model is told at the next turn).
func (h *Host) tookOver(ctx context.Context, o tool.Identity, id string, c Claim) {
	h.mu.Lock()
	lc := h.live[id]
	busy := lc != nil && lc.busy
	take := lc != nil && !lc.busy && lc.owner == o
	if take {
		lc.busy = true
	}
	h.mu.Unlock()
	if !busy { // a request here holds it: a turn it runs saves its own end
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		if lost := h.settleOrphan(sctx, o, id, c.Epoch); lost != "" {
			h.rep.mu.Lock()
			h.rep.note[id] = strings.TrimSuffix(cmp.Or(h.rep.note[id], takeoverNote), "]") + " " + lost + "]"
			h.rep.mu.Unlock()
		}
		cancel()
	}
	if take {
		cur, err := h.store.Info(ctx, o, id)
		if err != nil || cur.Version != lc.conv.Version {
			// Another replica ran it meanwhile: this copy and its session are stale.
			h.closeSession(ctx, lc, provider.CloseEvicted, "evict")
			h.dropAsking(lc)
			h.mu.Lock()
			delete(h.live, id)
			h.mu.Unlock()
		}
		h.release(lc)
	}
	if c.TakenFrom == "" {
		return
	}
	h.rep.takeovers.Inc()
	h.log.Warn("host: took a session over from a replica that stopped renewing its lease", "session", id, "from", c.TakenFrom)
	now := h.now().UTC()
	t := &Turn{Kind: "takeover", Outcome: TurnTakenOver, Started: now, Ended: now,
		Error: "host: replica " + c.TakenFrom + " stopped renewing its lease; replica " + h.rep.self.ID + " took the session over and resumed it from the store; live state (interpreter variables, processes, sandbox files) was lost"}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := h.appendTurn(sctx, id, o, t); err != nil {
		h.log.Error("host: recording a takeover in the turn log", "session", id, "err", err)
	}
}

// turnRequest is what the provider is asked to run: the person's message
// as it is, and, when the conversation was just taken over from a replica
// that stopped answering, the note that says so as the turn's context.
// The note is told once: from the turn that begins with it (begin).
func (h *Host) turnRequest(id, runID, msg string) provider.TurnRequest {
	req := provider.TurnRequest{TurnID: runID, Input: msg}
	if h.rep != nil {
		h.rep.mu.Lock()
		req.Context = h.rep.note[id]
		h.rep.mu.Unlock()
	}
	return req
}

// noteTold forgets the note of a conversation once a turn carries it.
func (r *replicas) noteTold(id string) {
	r.mu.Lock()
	delete(r.note, id)
	r.mu.Unlock()
}

// forget lets go of a conversation this replica may have lost: the next
// request asks the store who holds it.
func (r *replicas) forget(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.held, id)
	delete(r.note, id)
	r.mu.Unlock()
}

// beat renews the held leases every third of their duration until close.
func (r *replicas) beat() {
	defer close(r.done)
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.renew()
		}
	}
}

// renew extends every held lease; the conversations whose leases another
// replica took meanwhile are closed here.
func (r *replicas) renew() {
	start := time.Now()
	r.mu.Lock()
	snap := make(map[string]*heldLease, len(r.held))
	ids := make([]string, 0, len(r.held))
	for id, hl := range r.held {
		snap[id] = hl
		ids = append(ids, id)
	}
	r.mu.Unlock()
	var lost []string
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), r.ttl/3)
		kept, err := r.l.Renew(ctx, ids)
		cancel()
		if err != nil {
			r.h.log.Warn("host: renewing this replica's session leases failed; they lapse unless the next renewal succeeds", "leases", len(ids), "err", err)
			return
		}
		keep := make(map[string]bool, len(kept))
		for _, id := range kept {
			keep[id] = true
		}
		r.mu.Lock()
		for id, hl := range snap {
			if r.held[id] != hl {
				continue // released or taken afresh meanwhile
			}
			if keep[id] {
				hl.until = start.Add(r.trust)
			} else {
				delete(r.held, id)
				delete(r.note, id)
				lost = append(lost, id)
				if f := r.fences[id]; f != nil {
					defer f.trip() // a turn running on it stops now
				}
			}
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	for id := range r.stale {
		lost = append(lost, id)
	}
	clear(r.stale)
	r.mu.Unlock()
	for _, id := range lost {
		r.h.dropLost(id)
	}
}

// dropLost closes this replica's copy of a conversation whose lease
// another replica took; one a request holds now is closed at a later beat.
func (h *Host) dropLost(id string) {
	h.mu.Lock()
	lc := h.live[id]
	if lc == nil {
		h.mu.Unlock()
		return
	}
	if lc.busy {
		h.mu.Unlock()
		h.rep.mu.Lock()
		if h.rep.held[id] == nil {
			h.rep.stale[id] = true
		}
		h.rep.mu.Unlock()
		return
	}
	lc.busy = true
	h.mu.Unlock()
	if h.rep.holds(id) {
		h.release(lc) // taken back meanwhile: it is ours again
		return
	}
	h.log.Warn("host: another replica holds this session's lease now; closing the copy held here", "session", id)
	h.closeSession(context.Background(), lc, provider.CloseEvicted, "evict")
	h.dropAsking(lc)
	h.mu.Lock()
	delete(h.live, id)
	h.mu.Unlock()
}

// releaseLease gives up the lease of a conversation this replica no
// longer holds in memory (closed or evicted).
func (h *Host) releaseLease(ctx context.Context, id string) {
	if h.rep == nil {
		return
	}
	h.rep.mu.Lock()
	delete(h.rep.held, id)
	delete(h.rep.note, id)
	h.rep.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.rep.ttl/3)
	defer cancel()
	if err := h.rep.l.Release(rctx, []string{id}); err != nil {
		h.log.Warn("host: releasing a session lease failed; it lapses on its own", "session", id, "err", err)
	}
}

// close stops the heartbeat and releases every lease; Shutdown calls it
// once every session here is closed.
func (r *replicas) close(ctx context.Context) error {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	ids := make([]string, 0, len(r.held))
	for id := range r.held {
		ids = append(ids, id)
	}
	clear(r.held)
	r.mu.Unlock()
	r.tr.CloseIdleConnections()
	if len(ids) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl/3)
	defer cancel()
	if err := r.l.Release(rctx, ids); err != nil {
		return fmt.Errorf("host: shutdown: releasing %d session leases failed; they lapse within %s: %w", len(ids), r.ttl, err)
	}
	return nil
}

// OneReplica is the Leases of a host that is the only one serving its
// store (SQLite, or PostgreSQL with one replica): it holds every lease,
// forwards nothing and asks the store nothing. Options.Leases nil means
// the same.
type OneReplica struct{}

var _ Leases = OneReplica{}

// Replica is empty: a sole replica needs no name.
func (OneReplica) Replica() Replica { return Replica{} }

// TTL is zero: nothing lapses.
func (OneReplica) TTL() time.Duration { return 0 }

// Claim holds every lease.
func (OneReplica) Claim(context.Context, tool.Identity, string) (Claim, error) {
	return Claim{Held: true, Epoch: 1}, nil
}

// Holder is always none: nobody else holds anything.
func (OneReplica) Holder(context.Context, string) (Holder, error) { return Holder{}, nil }

// Renew keeps every lease.
func (OneReplica) Renew(_ context.Context, ids []string) ([]string, error) { return ids, nil }

// Release has nothing to give up.
func (OneReplica) Release(context.Context, []string) error { return nil }
