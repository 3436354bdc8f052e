package jail

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// Refusal events are bounded: a burst, then a steady rate; what goes
// beyond is counted into the next event's Suppressed, and a final event
// carries what is left when the jail ends.
const (
	refusalBurst = 200
	refusalRate  = 20 // per second
)

// network is the host side of one jail's network: the listeners placed
// in its namespace, the connections relayed through them, and the
// refusal events. It owns every goroutine it starts and waits for them in
// close.
type network struct {
	label       string
	allow       *allowlist
	dialTimeout time.Duration
	emit        func(event.Event)
	transport   *http.Transport
	srv         *http.Server

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	closers   []io.Closer
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup

	refMu      sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

func newNetwork(label string, allow *allowlist, dialTimeout time.Duration, emit func(event.Event)) *network {
	n := &network{label: label, allow: allow, dialTimeout: dialTimeout, emit: emit,
		conns: map[net.Conn]struct{}{}, tokens: refusalBurst}
	n.transport = &http.Transport{
		Proxy: nil, // the egress proxy never chains to the host's proxy settings
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if _, ok := n.allow.allows(addr); !ok {
				return nil, fmt.Errorf("jail: %s is not on this agent's allowlist", addr)
			}
			return n.dial(ctx, addr)
		},
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0,
	}
	n.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !n.enter() {
				http.Error(w, errClosed.Error(), http.StatusServiceUnavailable)
				return
			}
			defer n.wg.Done()
			n.serveProxy(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	return n
}

// goroutine runs fn as a goroutine close waits for, unless the network
// is already closed (then it reports false and runs nothing).
func (n *network) goroutine(fn func()) bool {
	if !n.enter() {
		return false
	}
	go func() {
		defer n.wg.Done()
		fn()
	}()
	return true
}

// enter counts one more piece of work close must wait for, unless the
// network is closed.
func (n *network) enter() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	return true
}

// addCloser closes c when the network closes.
func (n *network) addCloser(c io.Closer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		c.Close()
		return
	}
	n.closers = append(n.closers, c)
}

func (n *network) track(cs ...net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		n.conns[c] = struct{}{}
	}
	return true
}

func (n *network) untrack(cs ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range cs {
		delete(n.conns, c)
	}
}

// serve starts accepting on l, placed in the jail's namespace: relayed to
// f, or to the egress proxy when f is nil.
func (n *network) serve(l net.Listener, f *forward) {
	n.mu.Lock()
	n.listeners = append(n.listeners, l)
	n.mu.Unlock()
	if f == nil {
		n.goroutine(func() { _ = n.srv.Serve(l) })
		return
	}
	fw := *f
	n.goroutine(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !n.goroutine(func() { n.forward(c, fw) }) {
				c.Close()
			}
		}
	})
}

func (n *network) forward(c net.Conn, f forward) {
	ctx, cancel := context.WithTimeout(context.Background(), n.dialTimeout)
	defer cancel()
	var up net.Conn
	var err error
	if f.expose != nil {
		a := f.expose.Listener.Addr()
		up, err = (&net.Dialer{}).DialContext(ctx, a.Network(), a.String())
	} else {
		up, err = n.dial(ctx, f.dial)
	}
	if err != nil {
		c.Close()
		return
	}
	n.relay(c, up)
}

func (n *network) dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: n.dialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}

// relay copies both ways until both sides are done, then closes both.
func (n *network) relay(a, b net.Conn) {
	if !n.track(a, b) {
		return
	}
	defer n.untrack(a, b)
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	<-done
}

// copyHalf copies from → to, then half-closes to (or closes both when
// the copy failed, which ends the other half too).
func copyHalf(to, from net.Conn) {
	if _, err := io.Copy(to, from); err != nil {
		to.Close()
		from.Close()
		return
	}
	if cw, ok := to.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		to.Close()
	}
}

// serveProxy is the egress proxy: CONNECT host:port, and plain HTTP with
// an absolute http:// URL, for allowed endpoints only.
func (n *network) serveProxy(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		n.connect(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "jail: this is the agent's egress proxy: send CONNECT host:port, or a request for an absolute http:// URL", http.StatusBadRequest)
		return
	}
	target := r.URL.Host
	if r.URL.Port() == "" {
		target = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	if _, ok := n.allow.allows(target); !ok {
		n.refuse(target, "proxy", "not on the agent's allowlist")
		http.Error(w, "jail: "+target+" is not on this agent's allowlist", http.StatusForbidden)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.Out.URL = pr.In.URL; pr.Out.Host = pr.In.Host },
		Transport: n.transport,
		ErrorLog:  log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, fmt.Sprintf("jail: reaching %s: %v", target, err), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

func (n *network) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	e, ok := n.allow.allows(target)
	if !ok {
		n.refuse(target, "proxy", "not on the agent's allowlist")
		http.Error(w, "jail: "+target+" is not on this agent's allowlist", http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.dialTimeout)
	up, err := n.dial(ctx, e.String())
	cancel()
	if err != nil {
		http.Error(w, fmt.Sprintf("jail: reaching %s: %v", target, err), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "jail: the proxy cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		up.Close()
		return
	}
	if err := flushBuffered(rw.Reader, up); err != nil {
		c.Close()
		up.Close()
		return
	}
	n.relay(c, up)
}

// flushBuffered sends what the HTTP server already read past the CONNECT
// request (a client that did not wait for the 200).
func flushBuffered(r *bufio.Reader, to net.Conn) error {
	if k := r.Buffered(); k > 0 {
		b, _ := r.Peek(k)
		_, err := to.Write(b)
		return err
	}
	return nil
}

// refuse reports a refused connection, within the event bound.
func (n *network) refuse(target, via, reason string) {
	n.refMu.Lock()
	now := time.Now()
	if !n.last.IsZero() {
		n.tokens += now.Sub(n.last).Seconds() * refusalRate
		if n.tokens > refusalBurst {
			n.tokens = refusalBurst
		}
	}
	n.last = now
	if n.tokens < 1 {
		n.suppressed++
		n.refMu.Unlock()
		return
	}
	n.tokens--
	sup := n.suppressed
	n.suppressed = 0
	n.refMu.Unlock()
	n.send(&Refused{Label: n.label, Target: target, Via: via, Reason: reason, Suppressed: sup})
}

func (n *network) send(p *Refused) {
	if n.emit != nil {
		n.emit(event.Event{Type: TypeRefused, Payload: p, Meta: event.Meta{Time: time.Now()}})
	}
}

// close stops every listener and connection and waits for every
// goroutine; then it reports refusals the bound held back.
func (n *network) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	for _, l := range n.listeners {
		l.Close()
	}
	for _, c := range n.closers {
		c.Close()
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	_ = n.srv.Close()
	n.wg.Wait()
	n.transport.CloseIdleConnections()
	n.refMu.Lock()
	sup := n.suppressed
	n.suppressed = 0
	n.refMu.Unlock()
	if sup > 0 {
		n.send(&Refused{Label: n.label, Via: "any", Reason: "refusals beyond the event bound", Suppressed: sup})
	}
}

var errClosed = errors.New("jail: the agent's network is closed")
