package acp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/provider"
)

// hostServer serves one session's host tools to its agent: an MCP server
// (mcpserve, over streamable HTTP) on a loopback listener of its own,
// answering only requests that carry the session's secret. The tools are
// the binding's facade, so every call is checked and bounded by the
// binding: its schema, 16 in flight, 32 KiB results, and refusal after
// release. Each call also takes a slot from the session's guard (the
// bound on everything the agent asks of the client) and is bounded by
// limits.clientWaitTimeout. A pooled agent's server lists the tools the
// host said it lends (lateTools) before a conversation binds them.
type hostServer struct {
	ln     net.Listener
	events func(event.Event)
	door   atomic.Pointer[hostDoor]
	http   *http.Server
	served chan struct{}
}

// hostDoor is the MCP server behind a hostServer and the secret it
// answers; replace puts another in its place.
type hostDoor struct {
	secret  string
	want    []byte // the Authorization header it answers
	mcp     *mcpserve.Server
	handler http.Handler
}

const hostToolsPath = "/mcp"

func newHostDoor(ht provider.HostTools, events func(event.Event)) (*hostDoor, error) {
	srv, err := mcpserve.New(provider.AsTools(ht), mcpserve.Options{Name: "agentry-host-tools", OnEvent: events})
	if err != nil {
		return nil, fmt.Errorf("acp: serving the host tools: %w", err)
	}
	handler, err := srv.HTTPHandler(mcpserve.HTTPOptions{MaxRequestBytes: provider.MaxHostToolArgumentBytes + 64<<10})
	if err != nil {
		return nil, fmt.Errorf("acp: serving the host tools: %w", err)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	secret := hex.EncodeToString(raw[:])
	return &hostDoor{secret: secret, want: []byte("Bearer " + secret), mcp: srv, handler: handler}, nil
}

// startHostServer serves ht on ln, or on a loopback listener of its own
// when ln is nil.
func startHostServer(ht provider.HostTools, events func(event.Event), g *guard, l Limits, ln net.Listener) (*hostServer, error) {
	d, err := newHostDoor(ht, events)
	if err != nil {
		return nil, err
	}
	h := &hostServer{ln: ln, events: events, served: make(chan struct{})}
	h.door.Store(d)
	if h.ln == nil {
		if h.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("acp: listening for the host-tools server: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle(hostToolsPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := h.door.Load()
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), d.want) != 1 {
			http.Error(w, "acp: this server answers only its session's agent", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost {
			// A GET is the session's event stream, not a request.
			d.handler.ServeHTTP(w, r)
			return
		}
		// A call takes a slot from the session's guard, as an ACP request
		// does, and is bounded like one that waits on a command.
		if rerr := g.admit(); rerr != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "acp: "+rerr.Message, http.StatusTooManyRequests)
			return
		}
		defer g.done()
		ctx, cancel := deadline(r.Context(), l, true)
		defer cancel()
		d.handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	h.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(h.served)
		_ = h.http.Serve(h.ln)
	}()
	return h, nil
}

// replace serves ht in place of what the server served, under a new
// secret, on the same listener (the one exposed to the agent's
// confinement): the old secret is refused from now on and the old MCP
// server's calls in flight are cancelled.
func (h *hostServer) replace(ctx context.Context, ht provider.HostTools) error {
	d, err := newHostDoor(ht, h.events)
	if err != nil {
		return err
	}
	if err := h.door.Swap(d).mcp.Shutdown(ctx); err != nil {
		return fmt.Errorf("acp: stopping the host-tools server: %w", err)
	}
	return nil
}

// server is the entry for session/new's mcpServers, with the address the
// agent reaches the listener at.
func (h *hostServer) server(addr string) sdk.McpServer {
	return sdk.McpServer{Http: &sdk.McpServerHttpInline{
		Name:    "agentry",
		Type:    "http",
		Url:     "http://" + addr + hostToolsPath,
		Headers: []sdk.HttpHeader{{Name: "Authorization", Value: "Bearer " + h.door.Load().secret}},
	}}
}

// close stops the MCP door (calls in flight are cancelled; the binding's
// release, after this, waits for them) and the HTTP server.
func (h *hostServer) close(ctx context.Context) error {
	merr := h.door.Load().mcp.Shutdown(ctx)
	herr := h.http.Shutdown(ctx)
	if herr != nil {
		herr = errors.Join(herr, h.http.Close())
	}
	<-h.served
	if errors.Is(herr, http.ErrServerClosed) {
		herr = nil
	}
	if err := errors.Join(merr, herr); err != nil {
		return fmt.Errorf("acp: stopping the host-tools server: %w", err)
	}
	return nil
}

// lateTools are a pooled agent's host tools (Config.Pool with
// ExpectHostTools): the definitions the host said it lends every
// conversation, listed by the agent's MCP server while it waits. A call
// is refused until a conversation lending the same tools takes the agent;
// from then on that conversation's binding answers, and only it: bound
// once, never rebound.
type lateTools struct {
	specs []provider.HostToolSpec
	ht    atomic.Pointer[provider.HostTools]
}

var _ provider.HostTools = (*lateTools)(nil)

func (l *lateTools) Tools() []provider.HostToolSpec {
	out := slices.Clone(l.specs)
	for i := range out {
		out[i].InputSchema = slices.Clone(out[i].InputSchema)
	}
	return out
}

func (l *lateTools) Instructions() *provider.Instructions {
	if ht := l.ht.Load(); ht != nil {
		return (*ht).Instructions()
	}
	return nil
}

// errUntaken is a call to a pooled agent's host tool before a
// conversation took it.
const errUntaken = "acp: no conversation has taken this agent yet; its host tools answer once one has"

func (l *lateTools) Invoke(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
	if ht := l.ht.Load(); ht != nil {
		return (*ht).Invoke(ctx, inv)
	}
	return provider.HostToolResult{Error: &provider.HostToolError{Code: string(provider.CodeHostBindingClosed), Message: errUntaken}}, nil
}

func (l *lateTools) Release(context.Context) error {
	return errors.New("acp: a pooled agent's host tools are released by the conversation that lent them")
}

// bind makes ht answer the calls; false when another was bound first.
func (l *lateTools) bind(ht provider.HostTools) bool { return l.ht.CompareAndSwap(nil, &ht) }

// sameHostTools reports whether two lists define the same tools, in the
// same order (schemas compared as JSON, spacing aside).
func sameHostTools(a, b []provider.HostToolSpec) bool {
	return slices.EqualFunc(a, b, func(x, y provider.HostToolSpec) bool {
		return x.Name == y.Name && x.Description == y.Description && sameJSON(x.InputSchema, y.InputSchema)
	})
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
