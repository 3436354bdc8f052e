package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

type ownerKey struct{}

// authed wraps an API handler: it refuses requests once Shutdown began,
// proves the caller, and passes the owner on. The owner comes from the
// authenticator and nothing else.
func (h *Host) authed(next func(http.ResponseWriter, *http.Request, Owner)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.enter() {
			writeError(w, shuttingDown())
			return
		}
		defer h.leave()
		o, err := h.auth.Authenticate(r)
		if err != nil {
			code, msg := CodeInvalidToken, ErrBadCredentials.Error()
			challenge := `Bearer realm="agentry", error="invalid_token"`
			if errors.Is(err, ErrNoCredentials) {
				code, msg, challenge = CodeUnauthenticated, ErrNoCredentials.Error(), `Bearer realm="agentry"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, newError(http.StatusUnauthorized, code, msg))
			return
		}
		next(w, r, o)
	}
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

	mux.HandleFunc("POST /v1/sessions", h.authed(h.handleCreate))
	mux.HandleFunc("GET /v1/sessions", h.authed(h.handleList))
	mux.HandleFunc("GET /v1/sessions/{id}", h.authed(h.handleGet))
	mux.HandleFunc("DELETE /v1/sessions/{id}", h.authed(h.handleClose))
	mux.HandleFunc("POST /v1/sessions/{id}/turns", h.authed(h.handleTurn))
	mux.HandleFunc("GET /v1/sessions/{id}/turns", h.authed(h.handleTurnLog))
	mux.HandleFunc("POST /v1/sessions/{id}/decision", h.authed(h.handleDecision))
	mux.HandleFunc("GET /v1/sessions/{id}/messages", h.authed(h.handleMessages))
	h.consoleRoutes(mux) // the web console at /, and the endpoints it reads (console.go)

	// Known paths with an unknown method: 405 in JSON, after the caller is
	// proved (an unproved caller learns nothing about the API's shape).
	allow := map[string]string{
		"/healthz":                   "GET, HEAD",
		"/readyz":                    "GET, HEAD",
		"/metrics":                   "GET, HEAD",
		"/v1/sessions":               "GET, HEAD, POST",
		"/v1/sessions/{id}":          "GET, HEAD, DELETE",
		"/v1/sessions/{id}/turns":    "GET, HEAD, POST",
		"/v1/sessions/{id}/decision": "POST",
		"/v1/sessions/{id}/messages": "GET, HEAD",
	}
	for path, methods := range allow {
		notAllowed := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", methods)
			writeError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "host: this path answers "+methods))
		}
		if strings.HasPrefix(path, "/v1/") {
			mux.HandleFunc(path, h.authed(func(w http.ResponseWriter, r *http.Request, _ Owner) { notAllowed(w, r) }))
		} else {
			mux.HandleFunc(path, notAllowed)
		}
	}
	mux.HandleFunc("/v1/", h.authed(func(w http.ResponseWriter, _ *http.Request, _ Owner) {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such path; the API is under /v1/sessions"))
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such path; the API is under /v1/sessions"))
	})
	return secureHeaders(mux)
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
	tooLarge := newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("host: the body is larger than %d bytes", h.opt.MaxBodyBytes))
	if r.ContentLength > h.opt.MaxBodyBytes {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opt.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge
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
	SessionID string    `json:"sessionId"`
	State     State     `json:"state"`
	Turns     int       `json:"turns"`
	Pending   *Pending  `json:"pending,omitempty"`
	LastRunID string    `json:"lastRunId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func viewOf(c Conversation) sessionView {
	return sessionView{SessionID: c.ID, State: c.State, Turns: c.Turns, Pending: c.Pending, LastRunID: c.LastRunID, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
}

func (h *Host) storeError(err error) *apiError {
	switch {
	case errors.Is(err, ErrNotFound):
		return notFound()
	case errors.Is(err, ErrConflict):
		return newError(http.StatusConflict, CodeConflict, ErrConflict.Error())
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

func (h *Host) handleCreate(w http.ResponseWriter, r *http.Request, o Owner) {
	body, ae := h.readBody(w, r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	if err := DecodeCreate(body); err != nil {
		writeError(w, asAPIError(err))
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	h.createMu.Lock()
	defer h.createMu.Unlock()
	n, err := h.store.CountOpen(ctx, o)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	if n >= h.opt.MaxOpenSessions {
		writeError(w, h.refuse(o, "open_sessions", h.opt.MaxOpenSessions, 60, CodeTooManySessions,
			fmt.Sprintf("host: you have %d open sessions, the most allowed; close one (DELETE /v1/sessions/{id}) first", n)))
		return
	}
	now := h.now().UTC()
	c := Conversation{ID: newSessionID(), Owner: o, State: StateOpen, CreatedAt: now, UpdatedAt: now}
	if err := h.store.Create(ctx, c); err != nil {
		writeError(w, h.storeError(err))
		return
	}
	h.mu.Lock()
	h.live[c.ID] = &liveConv{id: c.ID, owner: o, lastUsed: h.now(), conv: c}
	h.mu.Unlock()
	h.metrics.opened.Inc()
	h.emit(event.TypeHostSessionOpened, &event.HostSession{}, c.ID, o)
	w.Header().Set("Location", "/v1/sessions/"+c.ID)
	writeJSON(w, http.StatusCreated, viewOf(c))
}

func (h *Host) refuse(o Owner, limit string, bound, retryAfter int, code Code, msg string) *apiError {
	h.metrics.refused.WithLabelValues(limit).Inc()
	h.emit(event.TypeHostAdmissionRefused, &event.AdmissionRefused{Limit: limit, Bound: bound, RetryAfter: float64(retryAfter)}, "", o)
	e := newError(http.StatusTooManyRequests, code, msg)
	e.retryAfter = retryAfter
	return e
}

func (h *Host) handleList(w http.ResponseWriter, r *http.Request, o Owner) {
	cs, err := h.store.List(r.Context(), o, ListOptions{OpenOnly: r.URL.Query().Get("open") == "true"})
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	views := make([]sessionView, len(cs))
	for i, c := range cs {
		views[i] = viewOf(c)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": views})
}

func (h *Host) handleGet(w http.ResponseWriter, r *http.Request, o Owner) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		writeError(w, notFound())
		return
	}
	c, err := h.store.Info(r.Context(), o, id)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	writeJSON(w, http.StatusOK, viewOf(c))
}

func (h *Host) handleMessages(w http.ResponseWriter, r *http.Request, o Owner) {
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
	msgs := []llm.Message{}
	if c.Transcript != nil && c.Transcript.Messages != nil {
		msgs = c.Transcript.Messages
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessionId": c.ID, "messages": msgs})
}

func (h *Host) handleTurnLog(w http.ResponseWriter, r *http.Request, o Owner) {
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

// acquire takes the conversation for one request: 404 for anyone but its
// owner, 409 while another request holds it. It loads the conversation
// from the store when it is not in memory.
func (h *Host) acquire(ctx context.Context, o Owner, id string) (*liveConv, *apiError) {
	if !validSessionID(id) {
		return nil, notFound()
	}
	h.mu.Lock()
	lc, ok := h.live[id]
	h.mu.Unlock()
	if !ok {
		c, err := h.store.Load(ctx, o, id)
		if err != nil {
			return nil, h.storeError(err)
		}
		h.mu.Lock()
		if lc, ok = h.live[id]; !ok && c.State != StateClosed {
			lc = &liveConv{id: id, owner: o, lastUsed: h.now(), conv: c}
			h.live[id] = lc
		}
		h.mu.Unlock()
		if !ok && c.State == StateClosed {
			// A closed conversation is not held in memory.
			lc = &liveConv{id: id, owner: o, conv: c, busy: true}
			return lc, nil
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if lc.owner != o {
		return nil, notFound()
	}
	if lc.busy {
		return nil, newError(http.StatusConflict, CodeSessionBusy, "host: a turn is running on this session; wait for its answer (turns of one session run one at a time)")
	}
	lc.busy = true
	return lc, nil
}

func (h *Host) release(lc *liveConv) {
	h.mu.Lock()
	lc.busy = false
	lc.lastUsed = h.now()
	h.mu.Unlock()
}

// admitTurn takes a turn slot: 429 past the host's bound or the
// principal's.
func (h *Host) admitTurn(o Owner) *apiError {
	h.mu.Lock()
	switch {
	case h.turns >= h.opt.MaxTurns:
		h.mu.Unlock()
		return h.refuse(o, "turns", h.opt.MaxTurns, 1, CodeTooManyTurns, "host: the host is running as many turns as it allows; retry shortly")
	case h.byOwner[o] >= h.opt.MaxTurnsPerPrincipal:
		h.mu.Unlock()
		return h.refuse(o, "turns_per_principal", h.opt.MaxTurnsPerPrincipal, 1, CodeTooManyTurns,
			fmt.Sprintf("host: you have %d turns running, the most allowed; wait for one to answer", h.opt.MaxTurnsPerPrincipal))
	}
	h.turns++
	h.byOwner[o]++
	h.mu.Unlock()
	return nil
}

func (h *Host) endTurn(o Owner) {
	h.mu.Lock()
	h.turns--
	if h.byOwner[o]--; h.byOwner[o] <= 0 {
		delete(h.byOwner, o)
	}
	h.mu.Unlock()
}

func (h *Host) handleTurn(w http.ResponseWriter, r *http.Request, o Owner) {
	h.turn(w, r, o, "message")
}

func (h *Host) handleDecision(w http.ResponseWriter, r *http.Request, o Owner) {
	h.turn(w, r, o, "decision")
}

// turn runs a message or a decision, answering in JSON or as an event
// stream.
func (h *Host) turn(w http.ResponseWriter, r *http.Request, o Owner, kind string) {
	body, ae := h.readBody(w, r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	var msg TurnRequest
	var dec DecisionRequest
	var err error
	if kind == "message" {
		msg, err = DecodeTurn(body)
	} else {
		dec, err = DecodeDecision(body)
	}
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	if ae := h.admitTurn(o); ae != nil {
		writeError(w, ae)
		return
	}
	defer h.endTurn(o)
	id := r.PathValue("id")
	lc, ae := h.acquire(r.Context(), o, id)
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer h.release(lc)

	c := lc.conv
	switch {
	case c.State == StateClosed:
		writeError(w, newError(http.StatusConflict, CodeSessionClosed, "host: this session is closed; open a new one (POST /v1/sessions)"))
		return
	case kind == "message" && c.State == StatePaused:
		writeError(w, newError(http.StatusConflict, CodeAwaitingDecision,
			fmt.Sprintf("host: this session waits for a decision on %q (tool %s); answer it with POST /v1/sessions/%s/decision first", c.Pending.Question, c.Pending.Tool, id)))
		return
	case kind == "decision" && c.State != StatePaused:
		writeError(w, newError(http.StatusConflict, CodeNoPendingQuestion, "host: this session waits for no decision; send a message instead"))
		return
	}
	var cp agent.Checkpoint
	if kind == "decision" {
		var ae *apiError
		if cp, ae = h.checkpointOf(r, lc); ae != nil {
			writeError(w, ae)
			return
		}
	}

	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	ctx, cancelT := context.WithTimeout(ctx, h.opt.TurnTimeout)
	defer cancelT()
	ctl := &turnCtl{cancel: cancel}
	h.mu.Lock()
	h.running[ctl] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.running, ctl)
		h.mu.Unlock()
	}()

	run := func() (agent.Result, error) {
		if kind == "decision" {
			return h.engine.Resume(ctx, cp, agent.Decision{Approve: dec.Approve, Note: dec.Note})
		}
		return h.engine.Run(ctx, agent.Input{
			Message:      msg.Message,
			SessionID:    id,
			Identity:     &tool.Identity{Tenant: o.Tenant, Principal: o.Principal, ConversationID: id},
			Conversation: c.Transcript,
		})
	}
	start := time.Now()
	if wantsStream(r) {
		h.stream(w, r, lc, kind, start, ctx, run)
		return
	}
	res, err := run()
	status, out := h.settle(r, lc, kind, start, ctx, res, err)
	if out.Error != nil {
		writeError(w, out.Error)
		return
	}
	writeJSON(w, status, out)
}

func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			if mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// checkpointOf returns the paused turn's checkpoint, from memory or the
// store.
func (h *Host) checkpointOf(r *http.Request, lc *liveConv) (agent.Checkpoint, *apiError) {
	if lc.cp != nil {
		return *lc.cp, nil
	}
	b, err := h.store.LoadCheckpoint(r.Context(), lc.owner, lc.id)
	if err != nil {
		return agent.Checkpoint{}, h.storeError(err)
	}
	cp, err := agent.ParseCheckpoint(b)
	if err != nil {
		h.log.Error("host: a stored checkpoint does not parse", "session", lc.id, "err", err)
		return agent.Checkpoint{}, newError(http.StatusInternalServerError, CodeInternal, "host: the stored pause of this session cannot be read; close the session")
	}
	lc.cp = &cp
	return cp, nil
}

// turnResult is the body of a turn's answer: output, or a question.
type turnResult struct {
	RunID    string    `json:"runId,omitempty"`
	Output   *string   `json:"output,omitempty"`
	Awaiting *Pending  `json:"awaiting,omitempty"`
	Error    *apiError `json:"error,omitempty"`
}

// settle records how a turn ended — store first, then the answer — and
// returns the status and body to send. Nothing is answered that is not
// saved.
func (h *Host) settle(r *http.Request, lc *liveConv, kind string, start time.Time, turnCtx context.Context, res agent.Result, runErr error) (int, turnResult) {
	ctx, cancel := storeCtx(r)
	defer cancel()
	now := h.now().UTC()
	c := lc.conv
	if kind == "message" {
		c.Turns++
	}
	c.UpdatedAt = now
	turn := &Turn{RunID: res.RunID, Kind: kind, Started: now.Add(-time.Since(start)), Ended: now}
	var cpJSON []byte
	var status int
	out := turnResult{RunID: res.RunID}

	switch {
	case runErr != nil && res.RunID == "" && (errors.Is(runErr, agent.ErrShutdown) || errors.Is(runErr, agent.ErrSessionBusy)):
		// Refused before it began: nothing changed.
		if errors.Is(runErr, agent.ErrShutdown) {
			return 0, turnResult{Error: shuttingDown()}
		}
		return 0, turnResult{Error: newError(http.StatusConflict, CodeSessionBusy, "host: a turn is running on this session; wait for its answer")}
	case runErr != nil:
		cut := errors.Is(context.Cause(turnCtx), errCut)
		turn.Outcome, turn.Error = TurnFailed, runErr.Error()
		out.Error = newError(http.StatusInternalServerError, CodeTurnFailed, clipMessage(runErr.Error()))
		if cut {
			turn.Outcome = TurnCut
			out.Error = newError(http.StatusServiceUnavailable, CodeTurnCut, "host: the host shut down before the turn finished; the turn was recorded as failed; send the message again")
			out.Error.retryAfter = 5
		}
		if kind == "decision" {
			// The pause is spent: the run went on and failed.
			c.State, c.Pending = StateOpen, nil
			lc.cp = nil
		}
		h.metrics.failures.WithLabelValues("turn").Inc()
		h.emit(event.TypeHostTurnFailed, &event.HostTurnFailed{Error: clipMessage(runErr.Error())}, lc.id, lc.owner)
	case res.Paused != nil:
		b, err := json.Marshal(res.Paused.Checkpoint)
		if err != nil {
			_, _ = h.engine.AbandonCheckpoint(ctx, res.Paused.Checkpoint)
			return 0, turnResult{Error: newError(http.StatusInternalServerError, CodeInternal, "host: the pause could not be recorded; send the message again")}
		}
		cpJSON = b
		c.State, c.Pending = StatePaused, &Pending{Question: res.Paused.Question, Tool: res.Paused.ToolName}
		c.LastRunID = res.RunID
		turn.Outcome = TurnPaused
		status, out.Awaiting = http.StatusAccepted, c.Pending
	default:
		c.State, c.Pending, c.Transcript = StateOpen, nil, res.Conversation
		c.LastRunID = res.RunID
		turn.Outcome = TurnAnswered
		output := res.Output
		status, out.Output = http.StatusOK, &output
	}

	v, err := h.store.Save(ctx, Update{Conversation: c, Checkpoint: cpJSON, Turn: turn})
	if err != nil {
		if res.Paused != nil {
			// Unrecorded, the pause could never be answered: give it up now.
			_, _ = h.engine.AbandonCheckpoint(ctx, res.Paused.Checkpoint)
		}
		return 0, turnResult{Error: h.storeError(err)}
	}
	c.Version = v
	lc.conv = c
	if res.Paused != nil {
		cp := res.Paused.Checkpoint
		lc.cp = &cp
	} else if kind == "decision" {
		lc.cp = nil
	}
	h.metrics.turns.WithLabelValues(kind, turn.Outcome).Inc()
	h.metrics.durations.WithLabelValues(kind, turn.Outcome).Observe(time.Since(start).Seconds())
	if out.Error != nil {
		return 0, out
	}
	return status, out
}

func clipMessage(s string) string {
	if len(s) <= 1000 {
		return s
	}
	return s[:1000] + "…"
}

func (h *Host) handleClose(w http.ResponseWriter, r *http.Request, o Owner) {
	id := r.PathValue("id")
	lc, ae := h.acquire(r.Context(), o, id)
	if ae != nil {
		writeError(w, ae)
		return
	}
	if lc.conv.State == StateClosed {
		w.WriteHeader(http.StatusNoContent) // closing twice is a no-op
		return
	}
	defer h.release(lc)
	ctx, cancel := storeCtx(r)
	defer cancel()
	n := h.engine.CloseToolSessionsReason(ctx, id, toolsession.ReasonSessionEnd)
	c := lc.conv
	outcome := TurnClosed
	if c.State == StatePaused {
		n += h.abandon(ctx, lc)
		outcome = TurnAbandoned
	}
	now := h.now().UTC()
	c.State, c.Pending, c.UpdatedAt = StateClosed, nil, now
	if _, err := h.store.Save(ctx, Update{Conversation: c, Turn: &Turn{RunID: c.LastRunID, Kind: "close", Outcome: outcome, Started: now, Ended: now}}); err != nil {
		writeError(w, h.storeError(err))
		return
	}
	h.mu.Lock()
	delete(h.live, id)
	h.mu.Unlock()
	h.emit(event.TypeHostSessionClosed, &event.HostSession{ToolSessionsClosed: n, Reason: string(toolsession.ReasonSessionEnd)}, id, o)
	w.WriteHeader(http.StatusNoContent)
}
