//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitServer serves the bare repositories under a directory over git's
// smart HTTP (git http-backend), asking for password when it is set.
func gitServer(t *testing.T, password string) (*httptest.Server, string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git is not installed: %v", err)
		}
		t.Skipf("git is not installed: %v", err)
	}
	root := t.TempDir()
	work := t.TempDir()
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run(root, "init", "-q", "--bare", "-b", "main", "repo.git")
	run(work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("cloned into the jail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", "README.md")
	run(work, "commit", "-q", "-m", "first")
	run(work, "branch", "feature")
	run(work, "push", "-q", filepath.Join(root, "repo.git"), "main", "feature")
	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if password != "" {
			if _, p, ok := r.BasicAuth(); !ok || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "who are you", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	return s, u.Host
}

// workspaceFile reads one file of a conversation's workspace through the
// API.
func workspaceFile(t *testing.T, p *process, token, id, path string) string {
	t.Helper()
	code, body := callAs(t, p, token, "GET", "/v1/sessions/"+id+"/workspace?path="+path, "")
	if code != http.StatusOK {
		t.Fatalf("download %s: %d %s", path, code, body)
	}
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s is not in the download: %v", path, err)
		}
		if h.Name == path {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}

// Opening a conversation with {"clone"} clones from an allowed host into
// its workspace, jailed, with the person's credential as git's password
// (never in an argument or the URL); other hosts, other schemes and
// option-shaped URLs are refused.
func TestServeClonesAtOpen(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := acpAgentBinary(t)
	const password = "git-token-5150"
	cs := cloneServe(t, password, "--agent", "acp", "--agent-cmd", agentCmd, "--workspaces", "workspaces")
	p, alice, open, repo, hostport := cs.p, cs.alice, cs.open, cs.repo, cs.hostport

	code, body := open(map[string]string{"url": repo, "ref": "feature", "credential": "git"})
	if code != http.StatusCreated {
		t.Fatalf("a clone: %d %s\n%s", code, body, p.stderr)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	if got := workspaceFile(t, p, alice, s.SessionID, "README.md"); got != "cloned into the jail\n" {
		t.Fatalf("the cloned README: %q", got)
	}

	// Without the credential the server refuses git: nothing opens.
	if code, body := open(map[string]string{"url": repo}); code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "clone_failed") {
		t.Fatalf("a clone without the credential: %d %s", code, body)
	}
	if code, body := open(map[string]string{"url": repo, "credential": "nope"}); code != http.StatusPreconditionFailed || !strings.Contains(string(body), "credential_missing") {
		t.Fatalf("a clone with a credential not stored: %d %s", code, body)
	}
	for _, u := range []string{
		"https://example.com/repo.git",                     // not allowed
		"http://127.0.0.1:1/repo.git",                      // another port
		"file:///etc",                                      // a local path
		"ext::sh -c touch% /tmp/pwned",                     // a transport helper
		"--upload-pack=touch /tmp/pwned",                   // an option
		"http://user:pw@" + hostport + "/repo.git",         // a password in the URL
		"http://" + hostport + "/repo.git --upload-pack=x", // whitespace
	} {
		code, body := open(map[string]string{"url": u})
		if code != http.StatusBadRequest || !strings.Contains(string(body), "clone_refused") {
			t.Errorf("clone %q: %d %s", u, code, body)
		}
	}
	if code, body := open(map[string]string{"url": repo, "ref": "--upload-pack=x"}); code != http.StatusBadRequest {
		t.Errorf("an option as the ref: %d %s", code, body)
	}
	code, body = callAs(t, p, alice, "GET", "/v1/sessions", "")
	if code != http.StatusOK || strings.Count(string(body), `"sessionId"`) != 1 {
		t.Fatalf("only the one clone opened a conversation: %d %s", code, body)
	}
	ps, _ := exec.Command("ps", "-e", "-ww", "-o", "args=").CombinedOutput()
	if bytes.Contains(ps, []byte(password)) {
		t.Fatal("ps shows the credential")
	}
	if bytes.Contains([]byte(p.stderr.String()), []byte(password)) {
		t.Fatal("serve's log holds the credential")
	}
}

// The native agent: a clone at open lands in the conversation's jailed
// interpreter's /work, where the first turn's run_code lists it and
// reads the repository's bytes; git ran jailed with the person's
// credential, which no event, log line, ps line, transcript or store
// file holds. Other hosts are refused as for an ACP agent.
func TestServeClonesIntoNative(t *testing.T) {
	t.Parallel() // its own serve, directories and ports
	needAgentJail(t)
	const password = "git-token-8086"
	cs := cloneServe(t, password, "--agent", "native", "--runner", "jail")
	p, alice, open, repo, db, events := cs.p, cs.alice, cs.open, cs.repo, cs.db, cs.events

	code, body := open(map[string]string{"url": repo, "ref": "feature", "credential": "git"})
	if code != http.StatusCreated {
		t.Fatalf("a clone: %d %s\n%s", code, body, p.stderr)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	code, body = callAs(t, p, alice, "POST", "/v1/sessions/"+s.SessionID+"/turns", turnBody("import subprocess\n"+
		"print(subprocess.run(['ls', '-A', '/work'], capture_output=True, text=True).stdout)\n"+
		"print(subprocess.run(['cat', '/work/README.md'], capture_output=True, text=True).stdout)"))
	if code != http.StatusOK || !strings.Contains(string(body), "README.md") || !strings.Contains(string(body), ".git") ||
		!strings.Contains(string(body), "cloned into the jail") {
		t.Fatalf("the first turn's run_code did not find the clone in /work: %d %s", code, body)
	}

	// Without the credential the server refuses git, and nothing opens.
	if code, body := open(map[string]string{"url": repo}); code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "clone_failed") {
		t.Fatalf("a clone without the credential: %d %s", code, body)
	}
	for _, u := range []string{"https://example.com/repo.git", "http://127.0.0.1:1/repo.git", "file:///etc"} {
		if code, body := open(map[string]string{"url": u}); code != http.StatusBadRequest || !strings.Contains(string(body), "clone_refused") {
			t.Errorf("clone %q: %d %s", u, code, body)
		}
	}
	code, body = callAs(t, p, alice, "GET", "/v1/sessions", "")
	if code != http.StatusOK || strings.Count(string(body), `"sessionId"`) != 1 {
		t.Fatalf("only the one clone opened a conversation: %d %s", code, body)
	}
	ps, _ := exec.Command("ps", "-e", "-ww", "-o", "args=").CombinedOutput()
	if bytes.Contains(ps, []byte(password)) {
		t.Fatal("ps shows the credential")
	}
	_, transcript := callAs(t, p, alice, "GET", "/v1/sessions/"+s.SessionID+"/messages", "")
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = p.wait()
	files, _ := filepath.Glob(db + "*")
	files = append(files, events)
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || bytes.Contains(b, []byte(password)) {
			t.Fatalf("%s holds the credential (or cannot be read: %v)", f, err)
		}
	}
	for what, b := range map[string][]byte{"serve's log": []byte(p.stderr.String()), "the transcript": transcript} {
		if bytes.Contains(b, []byte(password)) {
			t.Fatalf("%s holds the credential", what)
		}
	}
}

// cloneServed is a serve of the built binary that may clone from a git
// server of the test's, with alice's credential "git" stored.
type cloneServed struct {
	p          *process
	alice      string
	repo       string // the git server's repository, branch "feature" included
	db, events string
	open       func(clone map[string]string) (int, []byte) // POST /v1/sessions {"clone"} as alice
	hostport   string                                      // the git server's host:port
}

// cloneServe starts a git server answering password, and serve with
// agentArgs, a store, an events file, a credentials key and
// --clone-allow for that server; a "workspaces" argument is made a
// directory of the test's. Alice stores password as her credential "git".
func cloneServe(t *testing.T, password string, agentArgs ...string) cloneServed {
	t.Helper()
	srv, hostport := gitServer(t, password)
	dir, events := agentDir(t)
	tokens, tok := principals(t, "alice")
	cs := cloneServed{alice: tok[0], repo: srv.URL + "/repo.git", db: filepath.Join(dir, "agentry.db"), events: events,
		hostport: hostport}
	args := append([]string{}, agentArgs...)
	for i, a := range args {
		if a == "workspaces" && i > 0 && args[i-1] == "--workspaces" {
			args[i] = filepath.Join(dir, "workspaces")
		}
	}
	args = append(args, "--tokens", tokens, "--store", cs.db, "--events", events,
		"--credentials-key-file", credentialKeyFile(t, dir), "--clone-allow", hostport)
	cs.p = startServeBinary(t, binary(t), nil, args...)
	b, _ := json.Marshal(map[string]string{"value": password})
	if code, body := callAs(t, cs.p, cs.alice, "PUT", "/v1/credentials/git", string(b)); code != http.StatusCreated {
		t.Fatalf("storing the credential: %d %s", code, body)
	}
	cs.open = func(clone map[string]string) (int, []byte) {
		b, _ := json.Marshal(map[string]any{"clone": clone})
		return callAs(t, cs.p, cs.alice, "POST", "/v1/sessions", string(b))
	}
	return cs
}
