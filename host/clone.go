package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// DefaultCloneTimeout bounds one clone at open.
const DefaultCloneTimeout = 10 * time.Minute

// CloneSpec is what POST /v1/sessions {"clone": …} asks for: a git
// repository cloned into the new conversation's workspace before it
// opens.
type CloneSpec struct {
	URL        string `json:"url"`
	Ref        string `json:"ref,omitempty"`
	Credential string `json:"credential,omitempty"`
}

// Cloner fills a new conversation's workspace from a git repository. The
// host checks the request's shape and the person's credential; the
// cloner decides which URLs it clones (Check, called before anything is
// made) and runs the clone confined (cmd/agentry's runs git in the jail,
// its network reaching the repository's host alone).
type Cloner interface {
	// Check refuses a URL the cloner will not fetch, saying why.
	Check(url string) error
	// Clone fetches job into the empty directory job.Dir.
	Clone(ctx context.Context, job CloneJob) error
}

// CloneJob is one clone: Secret is the person's credential when the
// request names one (the cloner hands it to git without an argument or
// the URL holding it), and Label a non-secret name for the run.
type CloneJob struct {
	Dir, URL, Ref, Secret, Label string
}

// checkClone refuses a clone request of the wrong shape, naming the
// field at fault.
func checkClone(c *CloneSpec) error {
	switch {
	case c.URL == "":
		return fieldError(CodeMissingField, "clone.url", "host: a clone names the repository: {\"clone\": {\"url\": \"https://host/repo.git\"}}")
	case len(c.URL) > 2048 || !cloneURLShape(c.URL):
		return fieldError(CodeCloneRefused, "clone.url", "host: a clone URL is https:// (or http://) HOST/PATH, without a user, password or option")
	case c.Ref != "" && !validRef(c.Ref):
		return fieldError(CodeInvalidField, "clone.ref", "host: a ref is a branch or tag name: letters, digits, '.', '_', '-' and '/', not starting with '-' and without '..'")
	case c.Credential != "" && !ValidCredentialName(c.Credential):
		return fieldError(CodeInvalidField, "clone.credential", "host: not a credential name; list yours with GET /v1/credentials")
	}
	return nil
}

// cloneURLShape accepts http(s) URLs with a host and no user
// information, whitespace or control characters: nothing git could take
// for an option (--upload-pack=…), a transport helper (ext::) or a local
// path (file://).
func cloneURLShape(u string) bool {
	rest, ok := strings.CutPrefix(u, "https://")
	if !ok {
		if rest, ok = strings.CutPrefix(u, "http://"); !ok {
			return false
		}
	}
	host, _, _ := strings.Cut(rest, "/")
	if host == "" || strings.Contains(host, "@") {
		return false
	}
	for _, r := range u {
		if r <= ' ' || r == 0x7f || r == '\\' {
			return false
		}
	}
	return true
}

func validRef(ref string) bool {
	if len(ref) > 256 || strings.HasPrefix(ref, "-") || strings.Contains(ref, "..") || strings.HasSuffix(ref, "/") || strings.HasPrefix(ref, "/") {
		return false
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

// cloneInto runs the clone a new conversation asked for into its
// workspace: its agent's working directory (an ACP agent's, before its
// session opens), or else the workspace of its provider session (the
// native agent's interpreter's /work), opened for the clone and returned
// to become the conversation's. A failed clone leaves nothing behind: no
// workspace, no session.
func (h *Host) cloneInto(r *http.Request, ag *hostedAgent, o tool.Identity, id, model string, c *CloneSpec) (*liveConv, *apiError) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.opt.CloneTimeout)
	defer cancel()
	job, ae := h.cloneJob(ctx, o, id, c)
	if ae != nil {
		return nil, ae
	}
	if ag.ownDir {
		dir, err := ag.workingDir(o, id)
		if err != nil {
			h.log.Error("host: making a workspace to clone into", "session", id, "err", err)
			return nil, newError(http.StatusInternalServerError, CodeInternal, "host: the session's workspace could not be prepared")
		}
		job.Dir = dir
		if ae := h.runClone(ctx, job); ae != nil {
			h.dropWorkspace(o, id)
			return nil, ae
		}
		return nil, nil
	}
	lc := &liveConv{id: id, owner: o, conv: Conversation{ID: id, Owner: o, Provider: ag.key, Agent: ag.stored, Model: model, State: StateOpen}}
	dir, ae := h.cloneTarget(ctx, lc)
	if ae == nil {
		job.Dir = dir
		ae = h.runClone(ctx, job)
	}
	if ae != nil {
		h.dropClone(ctx, lc)
		return nil, ae
	}
	return lc, nil
}

// cloneJob checks a clone against the cloner and opens the person's
// credential it names.
func (h *Host) cloneJob(ctx context.Context, o tool.Identity, id string, c *CloneSpec) (CloneJob, *apiError) {
	if h.opt.Cloner == nil {
		return CloneJob{}, newError(http.StatusNotImplemented, CodeCloneUnsupported,
			"host: this host clones no repositories; its operator serves with --clone-allow HOST to allow it")
	}
	if err := h.opt.Cloner.Check(c.URL); err != nil {
		return CloneJob{}, fieldError(CodeCloneRefused, "clone.url", "host: "+strings.TrimPrefix(err.Error(), "host: "))
	}
	job := CloneJob{URL: c.URL, Ref: c.Ref, Label: "clone-" + id[4:16]}
	if c.Credential == "" {
		return job, nil
	}
	if h.creds == nil {
		return CloneJob{}, noCredentials()
	}
	secret, err := h.openCredential(ctx, o, c.Credential)
	switch {
	case errors.Is(err, ErrNoCredential):
		return CloneJob{}, credentialMissing([]string{c.Credential})
	case errors.Is(err, errUnknownCredKey), errors.Is(err, errBadSeal):
		e := newError(http.StatusPreconditionFailed, CodeCredentialUnreadable, fmt.Sprintf("host: your credential %s cannot be opened: %v", c.Credential, err))
		e.Missing = []string{c.Credential}
		return CloneJob{}, e
	case err != nil:
		return CloneJob{}, h.storeError(err)
	}
	job.Secret = secret
	return job, nil
}

// cloneTarget opens lc's provider session and returns its workspace.
func (h *Host) cloneTarget(ctx context.Context, lc *liveConv) (string, *apiError) {
	if h.rep != nil {
		// As for an upload: the session's files live on this replica, and
		// the conversation's next turn may be taken by another.
		return "", newError(http.StatusNotImplemented, CodeCloneUnsupported,
			"host: a clone into the agent's session workspace is not served across replicas yet; serve with one replica (a SQLite store) to clone into the native agent's /work")
	}
	if ae := h.openSession(ctx, lc); ae != nil {
		return "", ae
	}
	dir, err := lc.sess.Workspace(ctx)
	if provider.CodeOf(err) == provider.CodeWorkspaceUnsupported {
		return "", newError(http.StatusNotImplemented, CodeCloneUnsupported,
			"host: this agent keeps no files the host can reach, so there is nothing to clone into; the native agent needs an interpreter kept for the conversation on a local runner (agentry serve's run_code)")
	}
	if err != nil {
		return "", h.workspaceError(lc, err)
	}
	return dir, nil
}

// runClone fetches job with the cloner.
func (h *Host) runClone(ctx context.Context, job CloneJob) *apiError {
	if err := h.opt.Cloner.Clone(ctx, job); err != nil {
		return newError(http.StatusUnprocessableEntity, CodeCloneFailed, "host: the clone failed: "+clipMessage(err.Error())+"; check the URL, the ref and the credential")
	}
	return nil
}

// dropClone undoes a clone into a session whose conversation does not
// open: the session closes, and the native agent's interpreter goes with
// it, its /work removed; the record the provider kept for it in the
// host's store (RecordDropper) is dropped, as no conversation holds it.
func (h *Host) dropClone(ctx context.Context, lc *liveConv) {
	h.closeSession(ctx, lc, provider.CloseRequested, "close")
	rd, ok := h.store.(RecordDropper)
	if !ok || lc.conv.Binding == "" {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := rd.DropRecord(dctx, lc.conv.Binding); err != nil {
		h.log.Warn("host: dropping the record of a failed clone's session", "session", lc.id, "err", err)
	}
}

// dropWorkspace removes what Options.WorkingDirectory made for a
// conversation that did not open.
func (h *Host) dropWorkspace(o tool.Identity, id string) {
	if h.opt.DropWorkspace == nil {
		return
	}
	if err := h.opt.DropWorkspace(o, id); err != nil {
		h.log.Warn("host: removing a failed clone's workspace", "session", id, "err", err)
	}
}

// isLive reports whether the conversation id is held in memory (it was
// created).
func (h *Host) isLive(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.live[id]
	return ok
}
