package agentcore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/agentcore"
)

// pipeListener is an in-memory network for one HTTP server: each dial is
// a net.Pipe whose far end the server accepts. Unlike a socket it lets
// the whole exchange run inside a synctest bubble, so timeouts run on the
// bubble's clock.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "fake-agentcore" }

// inBubble runs the fake over the in-memory network and hands fn a runner
// on the real SDK client.
func inBubble(t *testing.T, opt agentcore.Options, fn func(fake *fakeAgentCore, r *agentcore.Runner)) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(t)
		l := newPipeListener()
		srv := &http.Server{Handler: fake}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = srv.Serve(l)
		}()
		transport := &http.Transport{DialContext: l.dial}
		client := &http.Client{Transport: readOnlyBodies{transport}}
		defer func() {
			transport.CloseIdleConnections()
			_ = srv.Close()
			<-served
		}()
		opt.Config = testConfig("http://fake-agentcore", client)
		r, err := agentcore.New(context.Background(), opt)
		if err != nil {
			t.Fatal(err)
		}
		fn(fake, r)
	})
}

func TestExecuteTimeoutBreaksTheSession(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opt    time.Duration // Options.ExecTimeout
		req    time.Duration // ExecRequest.Timeout
		expect time.Duration
	}{
		{"runner default", 0, 0, agentcore.DefaultExecTimeout},
		{"runner option", 45 * time.Second, 0, 45 * time.Second},
		{"request wins", 45 * time.Second, 7 * time.Second, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, agentcore.Options{ExecTimeout: tc.opt}, func(fake *fakeAgentCore, r *agentcore.Runner) {
				ctx := context.Background()
				s, err := r.Start(ctx, code.StartRequest{Key: testKey})
				if err != nil {
					t.Fatal(err)
				}
				fake.set(func(f *fakeAgentCore) { f.hang = true })

				began := time.Now()
				_, err = s.Execute(ctx, code.ExecRequest{Code: "import time; time.sleep(3600)", Timeout: tc.req})
				if took := time.Since(began); took != tc.expect {
					t.Errorf("gave up after %v, want %v", took, tc.expect)
				}
				if !errors.Is(err, agentcore.ErrExecTimeout) || !errors.Is(err, agentcore.ErrBroken) {
					t.Fatalf("timed-out execute: %v", err)
				}
				<-fake.invoking

				fake.set(func(f *fakeAgentCore) { f.hang = false })
				if _, err := s.Execute(ctx, code.ExecRequest{Code: "print(1)"}); !errors.Is(err, agentcore.ErrBroken) {
					t.Fatalf("execute after a timeout: %v", err)
				}
				if n := fake.count("POST", "/tools/invoke"); n != 1 {
					t.Fatalf("%d invokes, want 1: a broken session must not call the service", n)
				}
				if err := s.Stop(ctx); err != nil {
					t.Fatalf("stopping a timed-out session: %v", err)
				}
			})
		})
	}
}

// readOnlyBodies hides the request body's WriteTo from net/http.
//
// Why: smithy-go closes the request body as soon as the response headers
// arrive, and its body wrapper then answers WriteTo with io.EOF. net/http,
// after copying ContentLength bytes, probes the body once more; if the
// response beat that probe, the probe's io.EOF counts as a failed write
// and the connection, response stream included, is dropped. Over a real
// network the probe always wins (it is nanoseconds after the write, the
// response a round trip away), but an in-memory pipe makes the race
// likely. Through Read alone a closed body is a plain end of body.
type readOnlyBodies struct{ next http.RoundTripper }

func (t readOnlyBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return t.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Body = struct{ io.ReadCloser }{req.Body}
	return t.next.RoundTrip(r)
}
