package host

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/tool"
)

// The web console: static files embedded in the binary, served at / under
// a strict Content-Security-Policy. The files hold no data and need no
// token (a browser cannot send one on a navigation); everything they show
// comes from the authenticated API, with its 404-for-others rule.

//go:embed console
var consoleFiles embed.FS

// consolePolicy is the console's Content-Security-Policy: scripts, styles
// and images only from the host itself, never inline; requests only to
// the host (and, when the console signs people in at an OpenID provider,
// to that provider's token endpoint, exactly); no framing, no form
// submission (a form the script has not taken over must not send a token
// anywhere), and DOM sinks that take strings refused (the console builds
// the page with textContent).
func consolePolicy(tokenEndpoint string) string {
	connect := "'self'"
	if u, err := url.Parse(tokenEndpoint); err == nil && tokenEndpoint != "" {
		// A source expression is scheme://host/path: no query, and no ;
		// or , (they separate directives and policies).
		connect += " " + u.Scheme + "://" + u.Host + strings.NewReplacer(";", "%3B", ",", "%2C").Replace(u.EscapedPath())
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src " + connect + "; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"
}

// apiPolicy is the API's: its answers are data, never a page to render or
// frame.
const apiPolicy = "default-src 'none'; frame-ancestors 'none'; sandbox"

// secureHeaders sets the headers every answer carries; the console's
// handlers replace the policy with the console's own.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", apiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

type consoleFile struct {
	body  []byte
	ctype string
	etag  string
}

var (
	consoleOnce  sync.Once
	consoleIndex map[string]consoleFile
)

// consoleAssets reads the embedded files once, with their types and
// content digests (ETags, so a browser revalidates cheaply).
func consoleAssets() map[string]consoleFile {
	consoleOnce.Do(func() {
		consoleIndex = make(map[string]consoleFile)
		_ = fs.WalkDir(consoleFiles, "console", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := consoleFiles.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			ct := mime.TypeByExtension(path.Ext(p))
			if ct == "" {
				ct = "application/octet-stream"
			}
			consoleIndex[p[len("console/"):]] = consoleFile{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
			return nil
		})
	})
	return consoleIndex
}

func serveConsoleFile(w http.ResponseWriter, r *http.Request, name, policy string) {
	f, ok := consoleAssets()[name]
	if !ok {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: no such console file"))
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", policy)
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}

// consoleRoutes adds the console (unless Options.NoConsole) and the API
// endpoints it reads beside the rest of /v1: who the caller is, a
// conversation's tool sessions, and its runs' timelines.
func (h *Host) consoleRoutes(mux *http.ServeMux) {
	rec := newRecord()
	h.router.record.Store(rec)

	if !h.opt.NoConsole {
		signIn := signInOf(h.auth)
		policy := consolePolicy("")
		if signIn != nil {
			policy = consolePolicy(signIn.TokenEndpoint)
		}
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { serveConsoleFile(w, r, "index.html", policy) })
		mux.HandleFunc("GET /console/{name}", func(w http.ResponseWriter, r *http.Request) { serveConsoleFile(w, r, r.PathValue("name"), policy) })
		// How the console signs people in: public, as a provider's
		// discovery document is (nil: pasted tokens only).
		mux.HandleFunc("GET /console/sign-in.json", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"oidc": signIn})
		})
	}
	mux.HandleFunc("GET /v1/events", h.authed(h.handleEvents))
	mux.HandleFunc("GET /v1/me", h.authed(func(w http.ResponseWriter, r *http.Request, _ tool.Identity) {
		writeJSON(w, http.StatusOK, callerOf(r))
	}))
	mux.HandleFunc("GET /v1/sessions/{id}/tool-sessions", h.authed(func(w http.ResponseWriter, r *http.Request, o tool.Identity) {
		id, ok := h.ownConversation(w, r, o)
		if !ok {
			return
		}
		live, closed, _ := rec.conv(id, o, h.now())
		writeJSON(w, http.StatusOK, map[string]any{"sessionId": id, "live": orEmpty(live), "closed": orEmpty(closed)})
	}))
	mux.HandleFunc("GET /v1/sessions/{id}/timeline", h.authed(func(w http.ResponseWriter, r *http.Request, o tool.Identity) {
		id, ok := h.ownConversation(w, r, o)
		if !ok {
			return
		}
		want := r.URL.Query().Get("run")
		now := h.now()
		_, _, runs := rec.conv(id, o, now)
		tls := []timeline{}
		for _, run := range runs {
			if want == "" || run.id == want {
				tls = append(tls, buildTimeline(run, now))
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"sessionId": id, "runs": tls})
	}))
	mux.HandleFunc("GET /v1/sessions/{id}/usage", h.authed(h.handleConversationUsage))
	for p, methods := range map[string]string{
		"/v1/sessions/{id}/usage":         "GET, HEAD",
		"/v1/me":                          "GET, HEAD",
		"/v1/events":                      "GET",
		"/v1/sessions/{id}/tool-sessions": "GET, HEAD",
		"/v1/sessions/{id}/timeline":      "GET, HEAD",
	} {
		mux.HandleFunc(p, h.authed(func(w http.ResponseWriter, _ *http.Request, _ tool.Identity) {
			w.Header().Set("Allow", methods)
			writeError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "host: this path answers "+methods))
		}))
	}
}

// handleConversationUsage answers GET /v1/sessions/{id}/usage: the
// usage record of each of the conversation's turns (a row per turn-log
// entry that used anything, its key the entry's seq), and their total.
// The records are the caller's since the conversation opened, bounded as
// every usage read is (Truncated says the bound was reached).
func (h *Host) handleConversationUsage(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	c, ok := h.callersConversation(w, r, o)
	if !ok {
		return
	}
	id := c.ID
	recs, err := h.store.UsageRecords(r.Context(), UsageQuery{Tenant: o.Tenant, Principal: o.Principal, Since: c.CreatedAt})
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	truncated := len(recs) >= MaxUsageRecords
	recs = slices.DeleteFunc(recs, func(rec UsageRecord) bool { return rec.Conversation != id })
	slices.SortFunc(recs, func(a, b UsageRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	rows := make([]UsageRow, 0, len(recs))
	for _, rec := range recs {
		row := TotalUsage([]UsageRecord{rec})
		row.Key = strconv.FormatInt(rec.Seq, 10)
		rows = append(rows, row)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessionId": id, "turns": rows, "total": TotalUsage(recs), "truncated": truncated})
}

// ownConversation answers 404 unless the path's conversation is the
// caller's, as every other read of the API does; the store decides.
func (h *Host) ownConversation(w http.ResponseWriter, r *http.Request, o tool.Identity) (string, bool) {
	c, ok := h.callersConversation(w, r, o)
	return c.ID, ok
}

// callersConversation is the path's conversation (without its transcript)
// when it is the caller's; otherwise it answers 404 (or the store's
// failure) and reports false.
func (h *Host) callersConversation(w http.ResponseWriter, r *http.Request, o tool.Identity) (Conversation, bool) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		writeError(w, notFound())
		return Conversation{}, false
	}
	c, err := h.store.Info(r.Context(), o, id)
	if err != nil {
		writeError(w, h.storeError(err))
		return Conversation{}, false
	}
	return c, true
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
