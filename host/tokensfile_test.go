package host_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// authAs authenticates one request bearing tok.
func authAs(a host.Authenticator, tok string) (host.Caller, error) {
	r := httptest.NewRequest("GET", "/v1/sessions", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return a.Authenticate(r)
}

func writeTokens(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	past, future := "2001-01-01T00:00:00Z", "2999-01-01T00:00:00+02:00"
	toks, err := host.ParseTokens(strings.NewReader(
		host.TokenLine("agt_old", alice) + " created=2000-01-01T00:00:00Z expires=" + past + "\n" +
			host.TokenLine("agt_new", bob) + " expires=" + future + " role=admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = authAs(toks, "agt_old")
	var ce *host.CredentialError
	if !errors.As(err, &ce) || ce.Code != host.CodeTokenExpired || !errors.Is(err, host.ErrBadCredentials) {
		t.Fatalf("an expired token: %v", err)
	}
	if !strings.Contains(err.Error(), past) || strings.Contains(err.Error(), "agt_old") {
		t.Fatalf("the refusal %q should name the expiry and never the token", err)
	}
	if who, err := authAs(toks, "agt_new"); err != nil || who.Identity != bob || who.Role != host.RoleAdmin {
		t.Fatalf("a token before its expiry: %+v %v", who, err)
	}
	info := toks.Info()
	if len(info) != 2 || !info[0].Created.Equal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) ||
		!info[1].Expires.Equal(time.Date(2998, 12, 31, 22, 0, 0, 0, time.UTC)) || !info[1].Created.IsZero() {
		t.Fatalf("info %+v", info)
	}
	for _, bad := range []string{" expires=tomorrow", " expires=2030-01-01", " created=1", " expires=" + past + " expires=" + past} {
		if _, err := host.ParseTokens(strings.NewReader(host.TokenLine("agt_x", alice) + bad)); err == nil ||
			!strings.HasPrefix(err.Error(), "host: tokens file line 1") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func TestTokenInfoShowsNoDigest(t *testing.T) {
	t.Parallel()
	line := host.TokenLine("agt_secret", alice)
	toks, err := host.ParseTokens(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	digest := strings.Fields(strings.TrimPrefix(line, "sha256:"))[0]
	info := toks.Info()
	if len(info) != 1 || len(info[0].ID) != host.TokenIDLen || !strings.HasPrefix(digest, info[0].ID) || info[0].Identity != alice {
		t.Fatalf("info %+v of %s", info, digest)
	}
}

func TestTokensFileReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	a, b := host.TokenLine("agt_a", alice), host.TokenLine("agt_b", bob)
	writeTokens(t, path, "# team", a, b)
	tf, err := host.OpenTokensFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authAs(tf, "agt_a"); err != nil {
		t.Fatal(err)
	}
	// An edit that changes nothing admitted is not a change.
	writeTokens(t, path, "# the team", a, b)
	if changed, err := tf.Reload(); err != nil || changed {
		t.Fatalf("a comment edit: changed %v, %v", changed, err)
	}
	writeTokens(t, path, b)
	if changed, err := tf.Reload(); err != nil || !changed {
		t.Fatalf("removing a line: changed %v, %v", changed, err)
	}
	if _, err := authAs(tf, "agt_a"); !errors.Is(err, host.ErrBadCredentials) {
		t.Fatalf("a removed token: %v", err)
	}
	// A file that does not parse keeps the last good tokens, and says so.
	writeTokens(t, path, b, "sha256:half-a-line")
	if _, err := tf.Reload(); err == nil || !strings.Contains(err.Error(), "stay admitted") {
		t.Fatalf("a broken file: %v", err)
	}
	if who, err := authAs(tf, "agt_b"); err != nil || who.Identity != bob {
		t.Fatalf("after a broken edit: %+v %v", who, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := tf.Reload(); err == nil {
		t.Fatal("a missing file reloaded")
	}
	if _, err := host.OpenTokensFile(path); err == nil {
		t.Fatal("opened a missing file")
	}
	if _, err := host.OpenTokensFile(filepath.Dir(path)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory as the tokens file: %v", err)
	}
}

// Watch sees an edit in place and a file renamed over the path, and
// reports a broken version once.
func TestTokensFileWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	a, b := host.TokenLine("agt_a", alice), host.TokenLine("agt_b", bob)
	writeTokens(t, path, a, b)
	tf, err := host.OpenTokensFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type report struct {
		n   int
		err error
	}
	reports := make(chan report, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tf.Watch(ctx, 5*time.Millisecond, func(tok *host.Tokens, err error) {
			r := report{err: err}
			if tok != nil {
				r.n = tok.Len()
			}
			reports <- r
		})
	})
	defer func() { cancel(); wg.Wait() }()
	// An edit in place is a truncation then a write, so the watch may
	// see the empty file first: wait for the report of the whole edit.
	next := func(want func(report) bool) report {
		t.Helper()
		for {
			select {
			case r := <-reports:
				if want(r) {
					return r
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no reload reported")
				return report{}
			}
		}
	}

	writeTokens(t, path, b) // in place, same second, maybe the same size class
	next(func(r report) bool { return r.err == nil && r.n == 1 })
	if _, err := authAs(tf, "agt_a"); !errors.Is(err, host.ErrBadCredentials) {
		t.Fatalf("a removed token after the watch: %v", err)
	}
	writeTokens(t, path, b, "sha256:broken")
	next(func(r report) bool { return r.err != nil && strings.Contains(r.err.Error(), "line 2") })
	other := filepath.Join(dir, "tokens.new")
	writeTokens(t, other, a, b, host.TokenLine("agt_c", tool.Identity{Tenant: "acme", Principal: "carol"}))
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	next(func(r report) bool { return r.err == nil && r.n == 3 })
	if who, err := authAs(tf, "agt_c"); err != nil || who.Principal != "carol" {
		t.Fatalf("a new token: %+v %v", who, err)
	}
}

func TestRevokeTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	a, b := host.TokenLine("agt_a", alice), host.TokenLine("agt_b", bob)
	writeTokens(t, path, "# keep me", a+" role=admin", "", b)
	toks, err := host.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	id := toks.Info()[0].ID
	removed, err := host.RevokeTokens(path, func(i host.TokenInfo) bool { return i.ID == id })
	if err != nil || len(removed) != 1 || removed[0].Identity != alice || removed[0].Role != host.RoleAdmin {
		t.Fatalf("revoke: %+v %v", removed, err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "# keep me\n\n"+b+"\n" {
		t.Fatalf("the file after a revoke:\n%s", got)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", info.Mode())
	}
	if removed, err := host.RevokeTokens(path, func(host.TokenInfo) bool { return false }); err != nil || removed != nil {
		t.Fatalf("revoking nothing: %v %v", removed, err)
	}
	writeTokens(t, path, b, "garbage line here")
	before, _ := os.ReadFile(path)
	if _, err := host.RevokeTokens(path, func(host.TokenInfo) bool { return true }); err == nil {
		t.Fatal("revoked in a file that does not parse")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("a refused revoke changed the file")
	}
}

// A check set with SetCheck refuses a version as a broken file would: the
// tokens read before stay, and Reload says why.
func TestTokensFileCheck(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	a, b := host.TokenLine("agt_a", alice), host.TokenLine("agt_b", bob)
	writeTokens(t, path, a)
	tf, err := host.OpenTokensFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tf.SetCheck(func(t *host.Tokens) error {
		if n := len(t.Owners()); n > 1 {
			return fmt.Errorf("%d principals, one expected", n)
		}
		return nil
	})
	writeTokens(t, path, a, b)
	if _, err := tf.Reload(); err == nil || !strings.Contains(err.Error(), "2 principals, one expected") || !strings.Contains(err.Error(), "stay admitted") {
		t.Fatalf("a refused version: %v", err)
	}
	if _, err := authAs(tf, "agt_b"); !errors.Is(err, host.ErrBadCredentials) {
		t.Fatalf("bob, in a refused version, was admitted: %v", err)
	}
	if who, err := authAs(tf, "agt_a"); err != nil || who.Identity != alice {
		t.Fatalf("alice after a refused version: %+v %v", who, err)
	}
	writeTokens(t, path, b)
	if changed, err := tf.Reload(); err != nil || !changed {
		t.Fatalf("an accepted version: changed %v, %v", changed, err)
	}
	if who, err := authAs(tf, "agt_b"); err != nil || who.Identity != bob {
		t.Fatalf("bob after an accepted version: %+v %v", who, err)
	}
}
