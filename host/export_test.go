package host

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
)

// HoldForwardedBody makes the replica h hold, in the next request with a
// body that it forwards, the read that finds the end of the body it sends,
// until release is closed; the channel returned is closed once that read
// has returned. On a loaded machine that read once came after the owner
// had begun to answer. Call it before h serves the request.
func HoldForwardedBody(h *Host, release <-chan struct{}) <-chan struct{} {
	read := make(chan struct{})
	var taken atomic.Bool
	next := h.rep.proxy.Transport
	h.rep.proxy.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.ContentLength <= 0 || taken.Swap(true) {
			return next.RoundTrip(req)
		}
		out := req.Clone(req.Context())
		out.Body = &heldBody{ReadCloser: req.Body, left: req.ContentLength, release: release, read: read}
		return next.RoundTrip(out)
	})
	return read
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// heldBody holds its first read past its last byte.
type heldBody struct {
	io.ReadCloser
	left     int64
	release  <-chan struct{}
	read     chan struct{}
	released bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.left > 0 || b.released {
		n, err := b.ReadCloser.Read(p)
		b.left -= int64(n)
		return n, err
	}
	b.released = true
	<-b.release
	defer close(b.read)
	return b.ReadCloser.Read(p)
}

// TurnContext is ctx as the host gives it to a provider for a turn whose
// end it saves in st: a SaveRecord made under it may wait for that save,
// and take returns what waits.
func TurnContext(ctx context.Context, st Store) (turn context.Context, take func() []RecordWrite) {
	sc := newTurnScope(st, nil, nil)
	return context.WithValue(ctx, turnScopeKey{}, sc), sc.take
}
