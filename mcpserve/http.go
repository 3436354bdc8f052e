package mcpserve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/tool"
)

// Authenticator proves who is calling from an HTTP request, from its
// Authorization: Bearer token. It returns (nil, nil) when the request
// carries no credentials, the identity the credentials prove, or an error
// when they are present but not accepted. An error with a method
// IdentityUnavailable() bool that reports true says the credentials could
// not be checked at all (the identity provider is down): that request is
// answered 503, not 401. It is called for every HTTP request and must be
// safe for concurrent use. agentry's authenticators (a tokens file, an
// OpenID provider) are chained by host.Chain: pass its Identity method.
//
// The identity reaches tools as tool.Call.Identity exactly as returned. It
// never comes from anything else the client sends.
type Authenticator func(*http.Request) (*tool.Identity, error)

// HTTPOptions configure [Server.HTTPHandler].
type HTTPOptions struct {
	// Authenticate proves callers. Without it every call has a nil
	// identity.
	Authenticate Authenticator
	// RequireAuth answers 401 to every request Authenticate does not prove.
	// Without it, a request with no credentials is served with a nil
	// identity; a request with bad credentials is always refused.
	RequireAuth bool
	// Stateless serves each request without an MCP session; see the SDK's
	// StreamableHTTPOptions.Stateless.
	Stateless bool
	// SessionTimeout closes MCP sessions idle for this long (default:
	// never).
	SessionTimeout time.Duration
	// MaxRequestBytes caps request bodies (default: the SDK's 4 MiB).
	MaxRequestBytes int64
}

// HTTPHandler serves the tools over MCP's streamable HTTP transport. Mount
// it where clients are told to connect (for example at /mcp).
//
// With Authenticate set, a request whose credentials prove a user carries
// that identity into every call it makes, and the MCP session it opens is
// bound to that user: another user, or no user, presenting its session id
// is refused by the SDK. A request with credentials that are not accepted
// gets 401, as does one with none when RequireAuth is set. After
// [Server.Shutdown] began, every request gets 503.
func (s *Server) HTTPHandler(o HTTPOptions) (http.Handler, error) {
	if o.RequireAuth && o.Authenticate == nil {
		return nil, errors.New("mcpserve: RequireAuth is set but there is no Authenticate to prove anyone; set HTTPOptions.Authenticate")
	}
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.sdk }, &mcp.StreamableHTTPOptions{
		Stateless:           o.Stateless,
		SessionTimeout:      o.SessionTimeout,
		MaxRequestBodyBytes: o.MaxRequestBytes,
		Logger:              s.opt.Logger,
	})
	// The SDK carries a proved user to tool handlers (RequestExtra.TokenInfo)
	// and binds sessions to it only through its bearer middleware, so a
	// proved request goes through it, with a verifier that hands over what
	// Authenticate already established.
	proved := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := ctx.Value(provedKey{}).(*auth.TokenInfo); ok {
			return ti, nil
		}
		return nil, auth.ErrInvalidToken
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(inner)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A POST (or DELETE) is counted until its answer is written, so
		// Shutdown closes no session under an answer on its way out. A GET
		// is an event stream that lasts as long as the session.
		if r.Method == http.MethodGet {
			if s.posts.isClosed() {
				shuttingDown(w)
				return
			}
		} else {
			if !s.posts.enter() {
				shuttingDown(w)
				return
			}
			defer s.posts.leave()
		}
		if o.Authenticate == nil {
			inner.ServeHTTP(w, r)
			return
		}
		id, err := o.Authenticate(r)
		var down interface{ IdentityUnavailable() bool }
		switch {
		case errors.As(err, &down) && down.IdentityUnavailable():
			w.Header().Set("Retry-After", "5")
			http.Error(w, "mcpserve: the identity provider cannot be reached, so the credentials cannot be checked; retry shortly", http.StatusServiceUnavailable)
			return
		case err != nil:
			unauthorized(w, `Bearer realm="agentry", error="invalid_token"`,
				"mcpserve: the credentials were not accepted; send Authorization: Bearer <token> with a token this server knows")
			return
		case id == nil && o.RequireAuth:
			unauthorized(w, `Bearer realm="agentry"`,
				"mcpserve: this server needs a bearer token; send Authorization: Bearer <token>")
			return
		case id == nil:
			inner.ServeHTTP(w, r)
			return
		}
		ti := &auth.TokenInfo{UserID: userID(id), Extra: map[string]any{identityExtra: proven{id: *id}}}
		proved.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), provedKey{}, ti)))
	}), nil
}

func shuttingDown(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	http.Error(w, "mcpserve: the server is shutting down; try again once it is back", http.StatusServiceUnavailable)
}

func unauthorized(w http.ResponseWriter, challenge, msg string) {
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, msg, http.StatusUnauthorized)
}

type provedKey struct{}

// identityExtra is where a proved identity rides in auth.TokenInfo.Extra.
// Its value has a type only this package can build, so nothing else that
// fills TokenInfo can pass for a proved identity.
const identityExtra = "agentry.identity"

type proven struct{ id tool.Identity }

// identityOf returns a copy of the identity the transport proved for this
// request, or nil. Each call gets its own copy.
func identityOf(req *mcp.CallToolRequest) *tool.Identity {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	p, ok := req.Extra.TokenInfo.Extra[identityExtra].(proven)
	if !ok {
		return nil
	}
	id := p.id
	return &id
}

// userID is what the SDK binds an HTTP session to: a digest of (tenant,
// principal), encoded so that different pairs never collide.
func userID(id *tool.Identity) string {
	b, _ := json.Marshal([2]string{id.Tenant, id.Principal})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
