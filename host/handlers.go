package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

type callerKey struct{}

// authed wraps an API handler: it refuses requests once Shutdown began,
// proves the caller, and passes the owner on (and the whole caller in the
// request's context, for handlers that ask about roles: callerOf). The
// caller comes from the authenticator and nothing else.
func (h *Host) authed(next func(http.ResponseWriter, *http.Request, tool.Identity)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.enter() {
			writeError(w, shuttingDown())
			return
		}
		defer h.leave()
		who, err := h.auth.Authenticate(r)
		if err != nil {
			writeError(w, authError(w, err))
			return
		}
		if !h.requests.enter(who.Identity) {
			writeError(w, h.tooManyRequests(who.Identity))
			return
		}
		defer h.requests.leave(who.Identity)
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
		if h.rep != nil {
			var answered bool
			if r, answered = h.rep.route(w, r, who.Identity); answered {
				return // answered by the replica holding the session
			}
		}
		next(w, r, who.Identity)
	}
}

// callerOf is the caller authed proved for this request.
func callerOf(r *http.Request) Caller {
	c, _ := r.Context().Value(callerKey{}).(Caller)
	return c
}

// authError is the answer to a request the authenticator did not prove:
// 401 with a challenge, and the refusal's code when it has one; 503 when
// the identity provider cannot be reached (the credentials may be fine).
// Nothing the credentials hold is repeated.
func authError(w http.ResponseWriter, err error) *apiError {
	if errors.Is(err, ErrIdentityUnavailable) {
		e := newError(http.StatusServiceUnavailable, CodeIdentityUnavailable, ErrIdentityUnavailable.Error())
		e.retryAfter = 5
		return e
	}
	if errors.Is(err, ErrNoCredentials) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentry"`)
		return newError(http.StatusUnauthorized, CodeUnauthenticated, ErrNoCredentials.Error())
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="agentry", error="invalid_token"`)
	var ce *CredentialError
	if errors.As(err, &ce) {
		return newError(http.StatusUnauthorized, ce.Code, ce.Message)
	}
	return newError(http.StatusUnauthorized, CodeInvalidToken, ErrBadCredentials.Error())
}

func shuttingDown() *apiError {
	e := newError(http.StatusServiceUnavailable, CodeShuttingDown, "host: the host is shutting down; retry against another replica or once it is back")
	e.retryAfter = 5
	return e
}

func (h *Host) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", h.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/openapi.json", h.handleOpenAPI) // the contract, docs/openapi.yaml (openapi.go)

	mux.HandleFunc("GET /v1/agents", h.authed(h.handleAgents))
	mux.HandleFunc("POST /v1/sessions", h.authed(h.handleCreate))
	mux.HandleFunc("GET /v1/sessions", h.authed(h.handleList))
	mux.HandleFunc("GET /v1/sessions/{id}", h.authed(h.handleGet))
	mux.HandleFunc("DELETE /v1/sessions/{id}", h.authed(h.handleClose))
	mux.HandleFunc("POST /v1/sessions/{id}/turns", h.authed(h.handleTurn))
	mux.HandleFunc("GET /v1/sessions/{id}/turns", h.authed(h.handleTurnLog))
	mux.HandleFunc("POST /v1/sessions/{id}/decision", h.authed(h.handleDecision))
	mux.HandleFunc("POST /v1/sessions/{id}/cancel", h.authed(h.handleCancel))
	mux.HandleFunc("GET /v1/sessions/{id}/messages", h.authed(h.handleMessages))
	mux.HandleFunc("PUT /v1/sessions/{id}/workspace", h.authed(h.handlePutWorkspace))
	mux.HandleFunc("GET /v1/sessions/{id}/workspace", h.authed(h.handleGetWorkspace))
	// A tenant's admins: its conversations' metadata, and closing them.
	mux.HandleFunc("GET /v1/tenants/{tenant}/sessions", h.authed(h.handleTenantList))
	mux.HandleFunc("GET /v1/tenants/{tenant}/sessions/{id}", h.authed(h.handleTenantGet))
	mux.HandleFunc("DELETE /v1/tenants/{tenant}/sessions/{id}", h.authed(h.handleTenantClose))
	// What turns used: the caller's own, and a tenant's for its admins.
	mux.HandleFunc("GET /v1/credentials", h.authed(h.handleListCredentials))
	mux.HandleFunc("PUT /v1/credentials/{name}", h.authed(h.handlePutCredential))
	mux.HandleFunc("DELETE /v1/credentials/{name}", h.authed(h.handleDeleteCredential))

	mux.HandleFunc("GET /v1/usage", h.authed(h.handleUsage))
	mux.HandleFunc("GET /v1/tenants/{tenant}/usage", h.authed(h.handleTenantUsage))
	// Standing approvals the caller made while answering (rules.go).
	mux.HandleFunc("GET /v1/rules", h.authed(h.handleRules))
	mux.HandleFunc("DELETE /v1/rules/{id}", h.authed(h.handleDeleteRule))
	h.consoleRoutes(mux) // the web console at /, and the endpoints it reads (console.go)

	// Known paths with an unknown method: 405 in JSON, after the caller is
	// proved (an unproved caller learns nothing about the API's shape).
	allow := map[string]string{
		"/healthz":                           "GET, HEAD",
		"/readyz":                            "GET, HEAD",
		"/metrics":                           "GET, HEAD",
		"/v1/openapi.json":                   "GET, HEAD",
		"/v1/agents":                         "GET, HEAD",
		"/v1/sessions":                       "GET, HEAD, POST",
		"/v1/sessions/{id}":                  "GET, HEAD, DELETE",
		"/v1/sessions/{id}/turns":            "GET, HEAD, POST",
		"/v1/sessions/{id}/decision":         "POST",
		"/v1/sessions/{id}/cancel":           "POST",
		"/v1/sessions/{id}/messages":         "GET, HEAD",
		"/v1/sessions/{id}/workspace":        "GET, HEAD, PUT",
		"/v1/tenants/{tenant}/sessions":      "GET, HEAD",
		"/v1/tenants/{tenant}/sessions/{id}": "GET, HEAD, DELETE",
		"/v1/usage":                          "GET, HEAD",
		"/v1/credentials":                    "GET, HEAD",
		"/v1/credentials/{name}":             "PUT, DELETE",
		"/v1/tenants/{tenant}/usage":         "GET, HEAD",
		"/v1/rules":                          "GET, HEAD",
		"/v1/rules/{id}":                     "DELETE",
	}
	for path, methods := range allow {
		notAllowed := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", methods)
			writeError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "host: this path answers "+methods))
		}
		if strings.HasPrefix(path, "/v1/") {
			mux.HandleFunc(path, h.authed(func(w http.ResponseWriter, r *http.Request, _ tool.Identity) { notAllowed(w, r) }))
		} else {
			mux.HandleFunc(path, notAllowed)
		}
	}
	mux.HandleFunc("/v1/", h.authed(func(w http.ResponseWriter, _ *http.Request, _ tool.Identity) {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such path; the API is under /v1/sessions"))
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such path; the API is under /v1/sessions"))
	})
	return secureHeaders(cleanPaths(mux))
}

// cleanPaths answers a path that is not clean (//, . or ..) with the API's
// JSON 404 rather than ServeMux's redirect in plain text: no client of
// this API sends one, and a redirect would only help a probe. (Malformed
// request lines and oversized headers are refused by net/http itself,
// before any handler, in plain text: that cannot be changed from here.)
func cleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "" || p[0] != '/' || (p != "/" && path.Clean(p) != strings.TrimSuffix(p, "/")) {
			writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such path; paths are clean (no //, . or ..) and the API is under /v1/sessions"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Host) handleReady(w http.ResponseWriter, r *http.Request) {
	if h.Draining() {
		writeError(w, shuttingDown())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		h.log.Warn("host: readiness: the store cannot be reached", "err", err)
		writeError(w, newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "host: the conversation store cannot be reached"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// readBody reads a capped JSON body: 413 past the cap, 415 for another
// media type.
func (h *Host) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "host: send the body as application/json")
		}
	}
	return h.readCapped(w, r)
}

// readCapped reads the whole body, up to Options.MaxBodyBytes: 413 past
// it, 400 when it cannot be read.
func (h *Host) readCapped(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	tooLarge := newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("host: the body is larger than %d bytes", h.opt.MaxBodyBytes))
	if r.ContentLength > h.opt.MaxBodyBytes {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opt.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge
		case errors.Is(err, errBodyTooSlow):
			return nil, h.bodyTooSlow()
		}
		return nil, newError(http.StatusBadRequest, CodeInvalidJSON, "host: the body could not be read")
	}
	return b, nil
}

func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return newError(http.StatusBadRequest, CodeInvalidJSON, err.Error())
}

// sessionView is a conversation as the API shows it.
type sessionView struct {
	SessionID string   `json:"sessionId"`
	State     State    `json:"state"`
	Turns     int      `json:"turns"`
	Pending   *Pending `json:"pending,omitempty"`
	// Interaction is a question or notice the agent raised outside a
	// turn's requests, waiting for the person (only while it waits).
	Interaction *InteractionView `json:"interaction,omitempty"`
	// Interactions are all the questions it waits on, oldest first (the
	// first is Interaction).
	Interactions []InteractionView `json:"interactions,omitempty"`
	Provider     string            `json:"provider,omitempty"`
	// Agent is the agent profile the session was opened with, Model the
	// model its person chose (absent: the agent's default).
	Agent     string    `json:"agent,omitempty"`
	Model     string    `json:"model,omitempty"`
	LastRunID string    `json:"lastRunId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func viewOf(c Conversation) sessionView {
	return sessionView{SessionID: c.ID, State: c.State, Turns: c.Turns, Pending: c.Pending, Provider: c.Provider, Agent: c.Agent, Model: c.Model, LastRunID: c.LastRunID,
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
}

func (h *Host) storeError(err error) *apiError {
	switch {
	case errors.Is(err, ErrNotFound):
		return notFound()
	case errors.Is(err, ErrConflict):
		return newError(http.StatusConflict, CodeConflict, ErrConflict.Error())
	case errors.Is(err, ErrFenced), errors.Is(err, ErrForwardVoided):
		e := newError(http.StatusServiceUnavailable, CodeSessionMoved, "host: another replica holds this session now; nothing was changed here; send the request again")
		e.retryAfter = 1
		return e
	}
	h.metrics.failures.WithLabelValues("store").Inc()
	h.log.Error("host: store failure", "err", err)
	e := newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "host: the conversation store failed; try again")
	e.retryAfter = 1
	return e
}

func notFound() *apiError {
	return newError(http.StatusNotFound, CodeNotFound, "host: no such session")
}

// storeCtx bounds a store call that must happen even when the request's
// client has gone.
func storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), 15*time.Second)
}

func (h *Host) handleCreate(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	body, ae := h.readBody(w, r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	req, err := DecodeCreate(body)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	ag, model, ae := h.pickAgent(req)
	if ae != nil {
		writeError(w, ae)
		return
	}
	if ok, wait := h.creates.take(o); !ok {
		writeError(w, h.rateLimited(o, wait))
		return
	}
	id := newSessionID()
	var cloned *liveConv // the session a clone went into, when it went into one
	if req.Clone != nil {
		// Cloned before the open bounds are taken (a clone is slow), once
		// they are checked: nothing is cloned for a person who could
		// not open it.
		if ae := h.beforeClone(r, ag, o); ae != nil {
			writeError(w, ae)
			return
		}
		if cloned, ae = h.cloneInto(r, ag, o, id, model, req.Clone); ae != nil {
			writeError(w, ae)
			return
		}
		defer func() {
			switch {
			case h.isLive(id): // opened: the clone stays
			case cloned != nil:
				h.dropClone(r.Context(), cloned) // refused below: the clone goes
			default:
				h.dropWorkspace(o, id)
			}
		}()
	}
	// After a clone: its store calls get their own bound.
	ctx, cancel := storeCtx(r)
	defer cancel()
	h.createMu.Lock()
	defer h.createMu.Unlock()
	if ae := h.openBound(ctx, o); ae != nil {
		writeError(w, ae)
		return
	}
	if ae := h.missingCredentials(ctx, ag, o); ae != nil {
		writeError(w, ae)
		return
	}
	now := h.now().UTC()
	c := Conversation{ID: id, Owner: o, Provider: ag.key, Agent: ag.stored, Model: model, State: StateOpen, CreatedAt: now, UpdatedAt: now}
	var sess *provider.ValidatedSession
	if cloned != nil {
		c.Binding, sess = cloned.conv.Binding, cloned.sess
	}
	if err := h.store.Create(ctx, c); err != nil {
		writeError(w, h.storeError(err))
		return
	}
	h.mu.Lock()
	h.live[c.ID] = &liveConv{id: c.ID, owner: o, lastUsed: h.now(), conv: c, sess: sess}
	h.mu.Unlock()
	h.metrics.opened.Inc()
	h.emit(TypeConversationOpened, &ConversationEvent{}, c.ID, o)
	if h.feed.heard(o) {
		h.feed.publish(o, FeedConversation, feedView{sessionView: viewOf(c)}, now)
	}
	w.Header().Set("Location", "/v1/sessions/"+c.ID)
	writeJSON(w, http.StatusCreated, viewOf(c))
}

// beforeClone checks, before a clone, what is checked again when the
// conversation is created: the person's open conversations and the
// credentials the agent needs.
func (h *Host) beforeClone(r *http.Request, ag *hostedAgent, o tool.Identity) *apiError {
	ctx, cancel := storeCtx(r)
	defer cancel()
	if ae := h.openBound(ctx, o); ae != nil {
		return ae
	}
	return h.missingCredentials(ctx, ag, o)
}

// openBound refuses a person who has as many open conversations as they
// may.
func (h *Host) openBound(ctx context.Context, o tool.Identity) *apiError {
	n, err := h.store.CountOpen(ctx, o)
	if err != nil {
		return h.storeError(err)
	}
	if n >= h.opt.MaxConversationsPerPrincipal {
		return h.refuse(o, "open_sessions", h.opt.MaxConversationsPerPrincipal, 60, CodeTooManySessions,
			fmt.Sprintf("host: you have %d open sessions, the most allowed; close one (DELETE /v1/sessions/{id}) first", n))
	}
	return nil
}

func (h *Host) refuse(o tool.Identity, limit string, bound, retryAfter int, code Code, msg string) *apiError {
	h.metrics.refused.WithLabelValues(limit).Inc()
	h.emit(TypeAdmissionRefused, &AdmissionRefused{Limit: limit, Bound: bound, RetryAfter: float64(retryAfter)}, "", o)
	e := newError(http.StatusTooManyRequests, code, msg)
	e.retryAfter = retryAfter
	return e
}

func (h *Host) handleList(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	opt, ae := listOptions(r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	cs, err := h.store.List(r.Context(), o, opt)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	cs, next := pageOf(cs, opt)
	views := make([]sessionView, len(cs))
	for i, c := range cs {
		views[i] = viewOf(c)
		if qs := h.askingViews(c.ID); len(qs) > 0 {
			views[i].Interaction, views[i].Interactions = &qs[0], qs
		}
	}
	writeJSON(w, http.StatusOK, listAnswer(map[string]any{"sessions": views}, next))
}

func (h *Host) handleGet(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	c, ok := h.callersConversation(w, r, o)
	if !ok {
		return
	}
	v := viewOf(c)
	if qs := h.askingViews(c.ID); len(qs) > 0 {
		v.Interaction, v.Interactions = &qs[0], qs
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Host) handleMessages(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		writeError(w, notFound())
		return
	}
	c, err := h.store.Load(r.Context(), o, id)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	msgs := c.Transcript
	if msgs == nil {
		msgs = []Message{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessionId": c.ID, "messages": msgs})
}

func (h *Host) handleTurnLog(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		writeError(w, notFound())
		return
	}
	ts, err := h.store.Turns(r.Context(), o, id)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	if ts == nil {
		ts = []Turn{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessionId": id, "turns": ts})
}

// adminView is a conversation as a tenant's admin sees it: its metadata
// and whose it is, never its transcript.
type adminView struct {
	sessionView
	Principal string `json:"principal"`
}

// adminTenant answers for a path under /v1/tenants/{tenant}: the tenant
// when the caller is an admin of it; otherwise 403 to a person of that
// tenant (who knows it exists), 404 to anyone else.
func (h *Host) adminTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	c, tenant := callerOf(r), r.PathValue("tenant")
	switch {
	case c.AdminOf(tenant):
		return tenant, true
	case c.Tenant == tenant:
		writeError(w, newError(http.StatusForbidden, CodeForbidden, "host: only an admin of this tenant may read or close its conversations; you reach your own under /v1/sessions"))
	default:
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such tenant"))
	}
	return "", false
}

// handleTenantList lists a tenant's conversations for its admin.
func (h *Host) handleTenantList(w http.ResponseWriter, r *http.Request, _ tool.Identity) {
	tenant, ok := h.adminTenant(w, r)
	if !ok {
		return
	}
	opt, ae := listOptions(r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	cs, err := h.store.ListTenant(r.Context(), tenant, opt)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	cs, next := pageOf(cs, opt)
	views := make([]adminView, len(cs))
	for i, c := range cs {
		views[i] = adminView{viewOf(c), c.Owner.Principal}
	}
	writeJSON(w, http.StatusOK, listAnswer(map[string]any{"tenant": tenant, "sessions": views}, next))
}

// tenantConversation reads the path's conversation of the admin's tenant
// (404 when it is another tenant's, or none).
func (h *Host) tenantConversation(w http.ResponseWriter, r *http.Request) (Conversation, bool) {
	tenant, ok := h.adminTenant(w, r)
	if !ok {
		return Conversation{}, false
	}
	id := r.PathValue("id")
	if !validSessionID(id) {
		writeError(w, notFound())
		return Conversation{}, false
	}
	c, err := h.store.TenantInfo(r.Context(), tenant, id)
	if err != nil {
		writeError(w, h.storeError(err))
		return Conversation{}, false
	}
	return c, true
}

func (h *Host) handleTenantGet(w http.ResponseWriter, r *http.Request, _ tool.Identity) {
	if c, ok := h.tenantConversation(w, r); ok {
		writeJSON(w, http.StatusOK, adminView{viewOf(c), c.Owner.Principal})
	}
}

// handleTenantClose closes a conversation of the admin's tenant as its
// owner's own close would (on the replica holding it).
func (h *Host) handleTenantClose(w http.ResponseWriter, r *http.Request, _ tool.Identity) {
	c, ok := h.tenantConversation(w, r)
	if !ok {
		return
	}
	if h.rep != nil {
		var answered bool
		if r, answered = h.rep.routeTo(w, r, c.Owner, c.ID, true); answered {
			return
		}
	}
	h.log.Info("host: a tenant's admin closes a conversation", "tenant", c.Owner.Tenant, "admin", callerOf(r).Principal, "session", c.ID)
	h.handleClose(w, r, c.Owner)
}
