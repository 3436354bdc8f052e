package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/internal/tarws"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Defaults of the workspace bounds.
const (
	DefaultWorkspaceMaxBytes   = tarws.DefaultMaxBytes
	DefaultWorkspaceMaxEntries = tarws.DefaultMaxEntries
)

// Event types of the host's workspace transfers.
const (
	TypeWorkspaceUploaded   event.Type = "agentry.host.workspace_uploaded"
	TypeWorkspaceDownloaded event.Type = "agentry.host.workspace_downloaded"
)

// WorkspaceTransfer is the payload of a workspace upload or download: the
// counts, never a file's name or bytes. Refused is the upload's refusal
// code, when it was refused (entries before it stay).
type WorkspaceTransfer struct {
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
	Refused string `json:"refused,omitempty"`
	Path    bool   `json:"path,omitempty"` // a download of one path
}

func init() {
	event.Register(TypeWorkspaceUploaded, func() any { return new(WorkspaceTransfer) })
	event.Register(TypeWorkspaceDownloaded, func() any { return new(WorkspaceTransfer) })
}

// workspaceMedia are the bodies an upload may be sent as.
var workspaceMedia = map[string]bool{
	"application/x-tar": true, "application/tar": true, "application/gzip": true,
	"application/x-gzip": true, "application/octet-stream": true,
}

// openWorkspace takes the conversation, opens its provider session and
// returns the workspace's root. done releases both.
func (h *Host) openWorkspace(r *http.Request, o tool.Identity) (lc *liveConv, root *os.Root, done func(), ae *apiError) {
	if h.rep != nil {
		// A transfer is not forwarded to the replica holding the
		// conversation (an upload is too large to hold in memory, as
		// forwarded bodies are); refused rather than served by a replica
		// that does not hold the conversation.
		return nil, nil, nil, newError(http.StatusNotImplemented, CodeWorkspaceUnsupported,
			"host: workspace transfers are not served across replicas yet; serve with one replica (a SQLite store) to move files in and out")
	}
	lc, ae = h.acquire(r.Context(), o, r.PathValue("id"))
	if ae != nil {
		return nil, nil, nil, ae
	}
	fail := func(ae *apiError) (*liveConv, *os.Root, func(), *apiError) {
		h.release(lc)
		return nil, nil, nil, ae
	}
	switch {
	case lc.conv.State == StateClosed:
		return fail(newError(http.StatusConflict, CodeSessionClosed, "host: this session is closed, and its workspace with it; open a new one (POST /v1/sessions)"))
	}
	if _, ae := h.agentOf(lc.conv); ae != nil {
		return fail(ae)
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opt.TurnTimeout)
	defer cancel()
	if ae := h.openSession(ctx, lc); ae != nil {
		return fail(ae)
	}
	dir, err := lc.sess.Workspace(ctx)
	if err != nil {
		return fail(h.workspaceError(lc, err))
	}
	root, err = os.OpenRoot(dir)
	if err != nil {
		h.log.Error("host: opening a session's workspace", "session", lc.id, "err", err)
		return fail(newError(http.StatusInternalServerError, CodeInternal, "host: the session's workspace could not be opened"))
	}
	return lc, root, func() { root.Close(); h.release(lc) }, nil
}

// workspaceError maps a provider's refusal to hand over its workspace.
func (h *Host) workspaceError(lc *liveConv, err error) *apiError {
	switch provider.CodeOf(err) {
	case provider.CodeWorkspaceUnsupported:
		return newError(http.StatusNotImplemented, CodeWorkspaceUnsupported,
			"host: this agent keeps no files the host can reach; upload and download need an ACP agent, or the native agent with an interpreter kept for the conversation (agentry serve's run_code)")
	case provider.CodeConcurrentTurn, provider.CodeRequestPending:
		return newError(http.StatusConflict, CodeSessionBusy, "host: a turn is running on this session; wait for its answer")
	}
	h.log.Warn("host: the provider would not hand over a workspace", "session", lc.id, "err", err)
	e := newError(http.StatusServiceUnavailable, CodeProviderUnavailable, "host: the agent's workspace could not be reached: "+clipMessage(err.Error())+"; try again")
	e.retryAfter = 1
	return e
}

// handlePutWorkspace lands a tar stream (gzip or not) in the
// conversation's workspace, bounded and confined (package tarws).
func (h *Host) handlePutWorkspace(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !workspaceMedia[mt] {
			writeError(w, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "host: send the workspace as application/x-tar (or application/gzip)"))
			return
		}
	}
	lim := tarws.Limits{MaxBytes: h.opt.WorkspaceMaxBytes, MaxEntries: h.opt.WorkspaceMaxEntries}
	// The raw body too is bounded: a gzip stream is never larger than
	// what it holds by much.
	raw := lim.MaxBytes + int64(lim.MaxEntries+2)*4096
	if r.ContentLength > raw {
		writeError(w, newError(http.StatusRequestEntityTooLarge, CodeWorkspaceTooLarge, fmt.Sprintf("host: the upload is larger than a workspace may take (%d bytes of files)", lim.MaxBytes)))
		return
	}
	lc, root, done, ae := h.openWorkspace(r, o)
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer done()
	st, err := tarws.Extract(r.Context(), http.MaxBytesReader(w, r.Body, raw), root, lim)
	releaseBody(r)
	ev := &WorkspaceTransfer{Entries: st.Entries, Bytes: st.Bytes}
	if err != nil {
		ae := h.uploadError(lc, err, lim)
		if cutForPace(r) { // the archive reader reports the cut as a short archive
			ae = h.bodyTooSlow()
		}
		ev.Refused = string(ae.Code)
		h.emit(TypeWorkspaceUploaded, ev, lc.id, lc.owner)
		writeError(w, ae)
		return
	}
	h.emit(TypeWorkspaceUploaded, ev, lc.id, lc.owner)
	writeJSON(w, http.StatusOK, st)
}

// uploadError maps a refused upload to its answer.
func (h *Host) uploadError(lc *liveConv, err error, lim tarws.Limits) *apiError {
	var re *tarws.RefusalError
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyTooSlow):
		return h.bodyTooSlow()
	case errors.As(err, &re):
		status, code := http.StatusBadRequest, CodeWorkspaceInvalidArchive
		switch re.Code {
		case tarws.CodeUnsafePath:
			code = CodeWorkspaceUnsafePath
		case tarws.CodeLinkOutside:
			code = CodeWorkspaceLinkOutside
		case tarws.CodeSpecialFile:
			code = CodeWorkspaceSpecialFile
		case tarws.CodeTooLarge:
			status, code = http.StatusRequestEntityTooLarge, CodeWorkspaceTooLarge
		case tarws.CodeTooManyEntries:
			status, code = http.StatusRequestEntityTooLarge, CodeWorkspaceTooManyEntries
		case tarws.CodeConflict:
			status, code = http.StatusConflict, CodeWorkspaceConflict
		}
		return newError(status, code, "host: the upload was refused: "+re.Error()+"; entries before it were written")
	case errors.As(err, &mbe):
		return newError(http.StatusRequestEntityTooLarge, CodeWorkspaceTooLarge, fmt.Sprintf("host: the upload is larger than a workspace may take (%d bytes of files)", lim.MaxBytes))
	case bodyBroke(err):
		return newError(http.StatusBadRequest, CodeWorkspaceInvalidArchive, "host: the upload could not be read to its end; send it again")
	}
	h.log.Error("host: writing an upload into a workspace", "session", lc.id, "err", err)
	return newError(http.StatusInternalServerError, CodeInternal, "host: the upload could not be written into the workspace")
}

// bodyBroke reports a failure reading the request body (the client went
// away).
func bodyBroke(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled)
}

// handleGetWorkspace streams the conversation's workspace, or the one path
// ?path= names, as a tar stream.
func (h *Host) handleGetWorkspace(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	lc, root, done, ae := h.openWorkspace(r, o)
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer done()
	sub := r.URL.Query().Get("path")
	cw := &countingWriter{w: w, header: func() {
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
	}}
	err := tarws.Write(r.Context(), cw, root, sub)
	var re *tarws.RefusalError
	switch {
	case err == nil:
		h.emit(TypeWorkspaceDownloaded, &WorkspaceTransfer{Bytes: cw.n, Path: sub != ""}, lc.id, lc.owner)
	case cw.n > 0:
		// The stream began: the client must not take a cut archive for
		// a whole one.
		h.log.Warn("host: a workspace download broke off", "session", lc.id, "err", err)
		panic(http.ErrAbortHandler)
	case errors.Is(err, tarws.ErrNoPath):
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: the workspace holds nothing at that path; download it with no path to see what it holds"))
	case errors.As(err, &re):
		writeError(w, fieldError(CodeInvalidField, "path", "host: "+re.Msg))
	default:
		h.log.Error("host: reading a workspace", "session", lc.id, "err", err)
		writeError(w, newError(http.StatusInternalServerError, CodeInternal, "host: the workspace could not be read"))
	}
}

// countingWriter counts what went out, setting the headers before the
// first byte.
type countingWriter struct {
	w      io.Writer
	n      int64
	header func()
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n == 0 && c.header != nil {
		c.header()
		c.header = nil
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
