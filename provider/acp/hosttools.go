package acp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
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
// limits.clientWaitTimeout.
type hostServer struct {
	ln     net.Listener
	secret string
	mcp    *mcpserve.Server
	http   *http.Server
	served chan struct{}
}

const hostToolsPath = "/mcp"

// startHostServer serves ht on ln, or on a loopback listener of its own
// when ln is nil.
func startHostServer(ht provider.HostTools, events func(event.Event), g *guard, l Limits, ln net.Listener) (*hostServer, error) {
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
	h := &hostServer{secret: hex.EncodeToString(raw[:]), mcp: srv, served: make(chan struct{})}
	h.ln = ln
	if h.ln == nil {
		if h.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("acp: listening for the host-tools server: %w", err)
		}
	}
	want := []byte("Bearer " + h.secret)
	mux := http.NewServeMux()
	mux.Handle(hostToolsPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "acp: this server answers only its session's agent", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost {
			// A GET is the session's event stream, not a request.
			handler.ServeHTTP(w, r)
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
		handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	h.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(h.served)
		_ = h.http.Serve(h.ln)
	}()
	return h, nil
}

// server is the entry for session/new's mcpServers, with the address the
// agent reaches the listener at.
func (h *hostServer) server(addr string) sdk.McpServer {
	return sdk.McpServer{Http: &sdk.McpServerHttpInline{
		Name:    "agentry",
		Type:    "http",
		Url:     "http://" + addr + hostToolsPath,
		Headers: []sdk.HttpHeader{{Name: "Authorization", Value: "Bearer " + h.secret}},
	}}
}

// close stops the MCP door (calls in flight are cancelled; the binding's
// release, after this, waits for them) and the HTTP server.
func (h *hostServer) close(ctx context.Context) error {
	merr := h.mcp.Shutdown(ctx)
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
