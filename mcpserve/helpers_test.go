package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects what a server reports: events, errors and teardown
// reports, and lets a test wait for them without sleeping.
type recorder struct {
	mu      sync.Mutex
	events  []event.Event
	errs    []error
	reports []toolsession.Report
	changed chan struct{} // closed and replaced on every addition
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) options(o mcpserve.Options) mcpserve.Options {
	o.OnEvent = func(e event.Event) { r.add(func() { r.events = append(r.events, e) }) }
	o.OnError = func(err error) { r.add(func() { r.errs = append(r.errs, err) }) }
	o.Report = func(rep toolsession.Report) { r.add(func() { r.reports = append(r.reports, rep) }) }
	return o
}

// waitFor blocks until cond holds (checked under the lock) or ctx ends.
func (r *recorder) waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for {
		r.mu.Lock()
		ok := cond()
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %v", what, ctx.Err())
		}
	}
}

func (r *recorder) ofType(typ event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func (r *recorder) allReports() []toolsession.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]toolsession.Report(nil), r.reports...)
}

// newServer builds a server and shuts it down when the test ends.
func newServer(t *testing.T, tools []tool.Tool, o mcpserve.Options) *mcpserve.Server {
	t.Helper()
	s, err := mcpserve.New(tools, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// connect serves s over in-memory transports to the Go SDK's own client.
func connect(t *testing.T, s *mcpserve.Server) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st)
	if err != nil {
		t.Fatalf("server Connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client Connect: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

// serveHTTP serves s on a real loopback listener.
func serveHTTP(t *testing.T, s *mcpserve.Server, o mcpserve.HTTPOptions) *httptest.Server {
	t.Helper()
	h, err := s.HTTPHandler(o)
	if err != nil {
		t.Fatalf("HTTPHandler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectHTTP connects the Go SDK's client over streamable HTTP, with a
// bearer token when token is not empty.
func connectHTTP(t *testing.T, srv *httptest.Server, token string) (*mcp.ClientSession, error) {
	t.Helper()
	hc := srv.Client()
	if token != "" {
		hc = &http.Client{Transport: bearer{token: token, next: srv.Client().Transport}}
	}
	tr := &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

// text returns the text of a result's single content block.
func text(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("content block %T is not text", c)
		}
		b.WriteString(tc.Text)
	}
	return b.String()
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %s: %v", name, err)
	}
	return res
}

// seen is what a probe tool observed about its call.
type seen struct {
	ToolCallID string              `json:"toolCallId"`
	RunID      string              `json:"runId"`
	SessionID  string              `json:"sessionId"`
	Identity   *tool.Identity      `json:"identity"`
	Scopes     []toolsession.Scope `json:"scopes"`
}

type noArgs struct{}

// probe is a tool that reports the facts of its call.
func probe() tool.Tool {
	return tool.Func("probe", "reports what the door told it", func(_ context.Context, c *tool.Call, _ noArgs) (seen, error) {
		return seen{ToolCallID: c.ToolCallID, RunID: c.RunID, SessionID: c.SessionID, Identity: c.Identity, Scopes: c.Scopes}, nil
	})
}

func decodeSeen(t *testing.T, r *mcp.CallToolResult) seen {
	t.Helper()
	if r.IsError {
		t.Fatalf("probe failed: %s", text(t, r))
	}
	var s seen
	if err := json.Unmarshal([]byte(text(t, r)), &s); err != nil {
		t.Fatalf("probe result: %v", err)
	}
	return s
}

func asTeardown(t *testing.T, err error) *mcpserve.TeardownError {
	t.Helper()
	var te *mcpserve.TeardownError
	if !errors.As(err, &te) {
		t.Fatalf("error %v (%T) is not a *mcpserve.TeardownError", err, err)
	}
	return te
}
