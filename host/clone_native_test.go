package host_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/tool"
)

// fileCloner is a host.Cloner for the host's own tests: it "clones" by
// writing a fixed tree into the job's directory, which must be empty, as
// git clone's target must. It allows the host git.test alone and fails
// a repository named missing.git. cmd/agentry's TestServeClonesIntoNative
// runs the real one, git in the jail.
type fileCloner struct {
	mu   sync.Mutex
	jobs []host.CloneJob
	// together, when set, holds each clone until this many have begun.
	together int
	all      chan struct{}
}

const clonedReadme = "cloned into /work\n"

func (c *fileCloner) Check(url string) error {
	if !strings.HasPrefix(url, "https://git.test/") {
		return errors.New("this host clones only from git.test")
	}
	return nil
}

func (c *fileCloner) Clone(ctx context.Context, job host.CloneJob) error {
	c.mu.Lock()
	c.jobs = append(c.jobs, job)
	if len(c.jobs) == c.together {
		close(c.all)
	}
	c.mu.Unlock()
	if c.together > 0 {
		select {
		case <-c.all:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if strings.HasSuffix(job.URL, "/missing.git") {
		return errors.New("repository not found")
	}
	root, err := os.OpenRoot(job.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	f, err := root.Open(".")
	if err != nil {
		return err
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	if len(names) > 0 {
		return errors.New("the clone's directory is not empty: " + strings.Join(names, ", "))
	}
	if err := root.Mkdir("src", 0o755); err != nil {
		return err
	}
	if err := root.WriteFile("README.md", []byte(clonedReadme), 0o644); err != nil {
		return err
	}
	return root.WriteFile("src/main.py", []byte("print('hi')\n"), 0o644)
}

func (c *fileCloner) last(t *testing.T) host.CloneJob {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.jobs) == 0 {
		t.Fatal("the cloner was never asked")
	}
	return c.jobs[len(c.jobs)-1]
}

func (c *fileCloner) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.jobs)
}

// A clone at open lands in the native agent's interpreter's /work: the
// conversation's first turn runs in the interpreter the clone went into
// and reads the repository's bytes. The person's credential reaches the
// cloner and no event.
func TestCloneIntoNativeInterpreter(t *testing.T) {
	cl := &fileCloner{}
	f := newFixture(t, config{tools: []tool.Tool{jailedRunCode(t)}, credKeys: keyring(t, keyLine(t, "k1")),
		opt: host.Options{Cloner: cl, MaxConversationsPerPrincipal: 2}})
	const secret = "git-secret-4471"
	want(t, f.do("PUT", "/v1/credentials/git", "alice", map[string]string{"value": secret}), http.StatusCreated, "")
	open := func(who string, clone map[string]string) resp {
		return f.do("POST", "/v1/sessions", who, map[string]any{"clone": clone})
	}

	r := open("alice", map[string]string{"url": "https://git.test/team/app.git", "ref": "main", "credential": "git"})
	want(t, r, http.StatusCreated, "")
	id, _ := r.json(t)["sessionId"].(string)
	job := cl.last(t)
	if job.Secret != secret || job.Ref != "main" || job.URL != "https://git.test/team/app.git" || strings.Contains(job.Label, secret) {
		t.Fatalf("the cloner was asked %+v", job)
	}
	if f.liveTools() != 1 {
		t.Fatalf("%d interpreters live after the clone, want 1", f.liveTools())
	}
	out := f.runCode("alice", id, "import os\nprint(sorted(os.listdir('/work')))\nprint(open('/work/README.md').read())")
	if !strings.Contains(out, "['README.md', 'src']") || !strings.Contains(out, strings.TrimSpace(clonedReadme)) {
		t.Fatalf("the first turn did not find the clone in /work: %q", out)
	}
	if n := len(f.rec.ofType(tool.TypeSessionStarted)); n != 1 {
		t.Fatalf("%d interpreters started, want the clone's one, reused by the turn", n)
	}
	// The upload's download sees it too.
	r = f.do("GET", "/v1/sessions/"+id+"/workspace?path=README.md", "alice", nil)
	want(t, r, http.StatusOK, "")
	if got := untar(t, r.body)["README.md"]; got != clonedReadme {
		t.Fatalf("download of the clone: %q", got)
	}

	// A failed clone opens nothing and leaves no interpreter.
	want(t, open("alice", map[string]string{"url": "https://git.test/team/missing.git"}), http.StatusUnprocessableEntity, "clone_failed")
	// A refused host never reaches the cloner or an interpreter.
	asked := cl.count()
	want(t, open("alice", map[string]string{"url": "https://elsewhere.test/r.git"}), http.StatusBadRequest, "clone_refused")
	want(t, open("alice", map[string]string{"url": "https://git.test/r.git", "credential": "nope"}), http.StatusPreconditionFailed, "credential_missing")
	if cl.count() != asked {
		t.Fatal("a refused clone reached the cloner")
	}
	// At the open bound nothing is cloned.
	f.open("alice")
	want(t, open("alice", map[string]string{"url": "https://git.test/team/app.git"}), http.StatusTooManyRequests, "too_many_sessions")
	if cl.count() != asked {
		t.Fatal("a clone past the open bound reached the cloner")
	}
	if f.liveTools() != 1 {
		t.Fatalf("%d interpreters live, want only the first conversation's", f.liveTools())
	}
	r = f.do("GET", "/v1/sessions", "alice", nil)
	if n := len(r.json(t)["sessions"].([]any)); n != 2 {
		t.Fatalf("%d conversations, want the clone's and the plain one", n)
	}
	// The sessions the refused clones opened left no record: only the
	// clone's conversation has one (the plain one opened no session yet).
	db, err := sql.Open("sqlite", f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var records int
	if err := db.QueryRow(`SELECT count(*) FROM agentry_native`).Scan(&records); err != nil || records != 1 {
		t.Fatalf("%d provider records (%v), want the clone's conversation's alone", records, err)
	}
	f.rec.mu.Lock()
	events := slices.Clone(f.rec.events)
	f.rec.mu.Unlock()
	for _, e := range events {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), secret) {
			t.Fatalf("event %s holds the credential", e.Type)
		}
	}
}

// An agent keeping no workspace (the native agent without an interpreter
// kept for the conversation, or a provider without provider.Workspacer)
// is refused a clone by name, and nothing opens.
func TestCloneRefusedWithoutWorkspace(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		cl := &fileCloner{}
		f := newFixture(t, config{kind: kind, opt: host.Options{Cloner: cl}})
		r := f.do("POST", "/v1/sessions", "alice", map[string]any{"clone": map[string]string{"url": "https://git.test/team/app.git"}})
		want(t, r, http.StatusNotImplemented, "clone_unsupported")
		if cl.count() != 0 {
			t.Fatal("the cloner was asked")
		}
		r = f.do("GET", "/v1/sessions", "alice", nil)
		if n := len(r.json(t)["sessions"].([]any)); n != 0 {
			t.Fatalf("%d conversations opened by a refused clone", n)
		}
	})
}

// Replicas sharing a store refuse a clone into a session's workspace, as
// they refuse uploads: the files would live on one replica while another
// may take the conversation's next turn. Nothing opens.
func TestCloneIntoSessionRefusedAcrossReplicas(t *testing.T) {
	cl := &fileCloner{}
	a, _ := newReplicaWith(t, pgDSN(t), nil, nil, host.Options{Cloner: cl})
	r := a.do("POST", "/v1/sessions", "alice", map[string]any{"clone": map[string]string{"url": "https://git.test/team/app.git"}})
	want(t, r, http.StatusNotImplemented, "clone_unsupported")
	if !strings.Contains(string(r.body), "replicas") || cl.count() != 0 {
		t.Fatalf("%s; the cloner asked %d times", r.body, cl.count())
	}
	r = a.do("GET", "/v1/sessions", "alice", nil)
	if n := len(r.json(t)["sessions"].([]any)); n != 0 {
		t.Fatalf("%d conversations opened by a refused clone", n)
	}
}

// Two clones racing for a person's last open conversation are both made
// (the bound is checked before a clone and again at the open); the one
// refused at the open goes: its interpreter stops and its provider record
// is dropped.
func TestCloneRefusedAtTheOpenBoundGoes(t *testing.T) {
	cl := &fileCloner{together: 2, all: make(chan struct{})}
	f := newFixture(t, config{tools: []tool.Tool{jailedRunCode(t)}, opt: host.Options{Cloner: cl, MaxConversationsPerPrincipal: 1}})
	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			r := f.do("POST", "/v1/sessions", "alice", map[string]any{"clone": map[string]string{"url": "https://git.test/team/app.git"}})
			statuses <- r.status
		}()
	}
	got := []int{<-statuses, <-statuses}
	slices.Sort(got)
	if got[0] != http.StatusCreated || got[1] != http.StatusTooManyRequests {
		t.Fatalf("statuses %v, want one 201 and one 429", got)
	}
	if f.liveTools() != 1 {
		t.Fatalf("%d interpreters live, want the opened conversation's alone", f.liveTools())
	}
	db, err := sql.Open("sqlite", f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var records int
	if err := db.QueryRow(`SELECT count(*) FROM agentry_native`).Scan(&records); err != nil || records != 1 {
		t.Fatalf("%d provider records (%v), want the opened conversation's alone", records, err)
	}
}

// slowCloner takes a minute (synctest's) per clone, and clones nothing.
type slowCloner struct{}

func (slowCloner) Check(string) error { return nil }

func (slowCloner) Clone(ctx context.Context, job host.CloneJob) error {
	select {
	case <-time.After(time.Minute):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A clone slower than the store's 15-second bound on a request's store
// calls still opens its conversation: the calls after it are bounded
// afresh. The clock is synctest's.
func TestCloneOutlastingTheStoreBoundOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t, filepath.Join(t.TempDir(), "agentry.db"))
		ctx := context.Background()
		d := conformance.NewFakeDriver()
		reg, err := provider.OpenRegistry(ctx, []provider.Driver{d}, []provider.Definition{{ID: "agents", Provider: d.ProviderKey()}})
		if err != nil {
			t.Fatal(err)
		}
		inst, _ := reg.Instance("agents")
		auth, toks := tokensFor(t, nil)
		ws := t.TempDir()
		h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, EvictEvery: -1, RetentionEvery: -1, Cloner: slowCloner{},
			WorkingDirectory: func(tool.Identity, string) (string, error) { return ws, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if err := reg.Dispose(ctx); err != nil {
				t.Errorf("dispose: %v", err)
			}
		}()
		req := httptest.NewRequest("POST", "/v1/sessions", strings.NewReader(`{"clone":{"url":"https://git.test/team/app.git"}}`))
		req.Header.Set("Authorization", "Bearer "+toks["alice"])
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		began := time.Now()
		validating(t, h).ServeHTTP(w, req)
		if w.Code != http.StatusCreated || time.Since(began) < time.Minute {
			t.Fatalf("a clone of a minute: %d after %s: %s", w.Code, time.Since(began), w.Body)
		}
	})
}
