package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
)

// keyLine is a line of a credentials key file: id and 32 random bytes.
func keyLine(t *testing.T, id string) string {
	t.Helper()
	var k [host.CredentialKeySize]byte
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	return id + " " + base64.StdEncoding.EncodeToString(k[:]) + "\n"
}

func keyring(t *testing.T, lines ...string) *host.Keyring {
	t.Helper()
	k, err := host.ParseKeyring([]byte(strings.Join(lines, "")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// credsDriver is the conformance fake, recording the configuration
// each session opening passes it.
type credsDriver struct {
	*conformance.FakeDriver
	mu   sync.Mutex
	got  map[string]json.RawMessage // session id → configuration
	open int
}

func newCredsDriver() *credsDriver {
	return &credsDriver{FakeDriver: conformance.NewFakeDriver(), got: map[string]json.RawMessage{}}
}

func (d *credsDriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	m, err := d.FakeDriver.Materialize(ctx, def)
	if err != nil {
		return m, err
	}
	m.Capabilities.Sessions.Branch = provider.BranchUnsupported
	m.Adapter = credsAdapter{d: d, inner: m.Adapter}
	return m, nil
}

func (d *credsDriver) config(id string) json.RawMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.got[id]
}

type credsAdapter struct {
	d     *credsDriver
	inner provider.Adapter
}

func (a credsAdapter) note(id string, cfg json.RawMessage) {
	a.d.mu.Lock()
	a.d.got[id] = append(json.RawMessage(nil), cfg...)
	a.d.open++
	a.d.mu.Unlock()
}

func (a credsAdapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	a.note(req.SessionID, req.Configuration)
	return a.inner.Create(ctx, req)
}

func (a credsAdapter) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	a.note(req.SessionID, req.Configuration)
	return a.inner.(provider.Resumer).Resume(ctx, req)
}

// envOf reads the credentials a session configuration carries.
func envOf(t *testing.T, cfg json.RawMessage) map[string]string {
	t.Helper()
	var c struct {
		Credentials map[string]string `json:"credentials"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatalf("the configuration is not JSON: %v: %s", err, cfg)
	}
	return c.Credentials
}

func TestCredentialsPutListDelete(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			f := newFixture(t, config{kind: onFake, dsn: sk.dsn(t), credKeys: keyring(t, keyLine(t, "k1"))})
			const secret = "sk-alice-0123456789abcdef"

			r := f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": secret})
			want(t, r, http.StatusCreated, "")
			if bytes.Contains(r.body, []byte(secret)) {
				t.Fatalf("the answer to a put holds the secret: %s", r.body)
			}
			r = f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": secret + "2"})
			want(t, r, http.StatusOK, "")

			r = f.do("GET", "/v1/credentials", "alice", nil)
			want(t, r, http.StatusOK, "")
			if bytes.Contains(r.body, []byte(secret)) {
				t.Fatalf("the list holds the secret: %s", r.body)
			}
			var list struct {
				Credentials []struct{ Name, CreatedAt, UpdatedAt string }
			}
			if err := json.Unmarshal(r.body, &list); err != nil || len(list.Credentials) != 1 || list.Credentials[0].Name != "openai" {
				t.Fatalf("list = %s (%v), want one credential named openai", r.body, err)
			}

			// Another person, even of the same principal name in another
			// tenant, sees none of it.
			for _, who := range []string{"bob", "carol"} {
				r = f.do("GET", "/v1/credentials", who, nil)
				if !bytes.Contains(r.body, []byte(`"credentials":[]`)) {
					t.Fatalf("%s lists %s", who, r.body)
				}
				want(t, f.do("DELETE", "/v1/credentials/openai", who, nil), http.StatusNotFound, "not_found")
			}

			want(t, f.do("DELETE", "/v1/credentials/openai", "alice", nil), http.StatusNoContent, "")
			want(t, f.do("DELETE", "/v1/credentials/openai", "alice", nil), http.StatusNotFound, "not_found")

			// Refusals.
			want(t, f.do("PUT", "/v1/credentials/Open%20AI", "alice", map[string]string{"value": "x"}), http.StatusBadRequest, "invalid_field")
			want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": ""}), http.StatusBadRequest, "invalid_field")
			want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]any{}), http.StatusBadRequest, "missing_field")
			want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": strings.Repeat("x", host.MaxCredentialBytes+1)}), http.StatusBadRequest, "invalid_field")
			want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": "a\x00b"}), http.StatusBadRequest, "invalid_field")
			want(t, f.do("PUT", "/v1/credentials/openai", "", map[string]string{"value": "x"}), http.StatusUnauthorized, "unauthenticated")
			want(t, f.do("GET", "/v1/credentials/openai", "alice", nil), http.StatusMethodNotAllowed, "method_not_allowed")

			// The events name the credential, never its value.
			if n := len(f.rec.ofType(host.TypeCredentialStored)); n != 2 {
				t.Fatalf("%d credential_stored events, want 2", n)
			}
			if n := len(f.rec.ofType(host.TypeCredentialDeleted)); n != 1 {
				t.Fatalf("%d credential_deleted events, want 1", n)
			}
			f.rec.mu.Lock()
			defer f.rec.mu.Unlock()
			for _, e := range f.rec.events {
				b, _ := json.Marshal(e)
				if bytes.Contains(b, []byte(secret)) {
					t.Fatalf("an event holds the secret: %s", b)
				}
			}
		})
	}
}

func TestCredentialsBounded(t *testing.T) {
	f := newFixture(t, config{kind: onFake, credKeys: keyring(t, keyLine(t, "k1"))})
	for i := range host.MaxCredentialsPerPrincipal {
		want(t, f.do("PUT", fmt.Sprintf("/v1/credentials/c%d", i), "alice", map[string]string{"value": "v"}), http.StatusCreated, "")
	}
	want(t, f.do("PUT", "/v1/credentials/one-more", "alice", map[string]string{"value": "v"}), http.StatusConflict, "too_many_credentials")
	// Replacing one is not one more.
	want(t, f.do("PUT", "/v1/credentials/c0", "alice", map[string]string{"value": "w"}), http.StatusOK, "")
	want(t, f.do("PUT", "/v1/credentials/c0", "bob", map[string]string{"value": "w"}), http.StatusCreated, "")
}

func TestCredentialsUnavailableWithoutKeys(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": "x"}), http.StatusNotImplemented, "credentials_unavailable")
	want(t, f.do("GET", "/v1/credentials", "alice", nil), http.StatusNotImplemented, "credentials_unavailable")
	want(t, f.do("DELETE", "/v1/credentials/openai", "alice", nil), http.StatusNotImplemented, "credentials_unavailable")
}

func TestCredentialsOptionsRefused(t *testing.T) {
	st := openStore(t, t.TempDir()+"/a.db")
	t.Cleanup(func() { _ = st.Close() })
	auth, _ := tokensFor(t, nil)
	reg, err := provider.OpenRegistry(context.Background(), []provider.Driver{conformance.NewFakeDriver()},
		[]provider.Definition{{ID: "a", Provider: conformance.FakeKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Dispose(context.Background()) })
	inst, _ := reg.Instance("a")
	k := keyring(t, keyLine(t, "k1"))
	for name, o := range map[string]host.Options{
		"no keys":      {Credentials: st},
		"no store":     {CredentialKeys: k},
		"needs only":   {AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "OPENAI_API_KEY"}}},
		"bad name":     {Credentials: st, CredentialKeys: k, AgentCredentials: []host.AgentCredential{{Name: "Open AI", Var: "X"}}},
		"bad variable": {Credentials: st, CredentialKeys: k, AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "1X"}}},
		"home":         {Credentials: st, CredentialKeys: k, AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "HOME"}}},
		"twice":        {Credentials: st, CredentialKeys: k, AgentCredentials: []host.AgentCredential{{Name: "a", Var: "X"}, {Name: "b", Var: "X"}}},
	} {
		o.Provider, o.Store, o.Auth = inst, st, auth
		if h, err := host.New(o); err == nil {
			_ = h.Shutdown(context.Background())
			t.Errorf("%s: host.New took it", name)
		}
	}
}

// TestCredentialsReachOnlyTheirAgent: a conversation opens only once the
// person stored what the agent needs, and its agent gets that person's
// secret, as the variable named, and nobody else's.
func TestCredentialsReachOnlyTheirAgent(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			d := newCredsDriver()
			f := newFixture(t, config{kind: onFake, dsn: sk.dsn(t), provider: d, credKeys: keyring(t, keyLine(t, "k1")),
				opt: host.Options{IdleEvict: time.Nanosecond, AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "OPENAI_API_KEY"}, {Name: "gh", Var: "GH_TOKEN"}}}})

			r := f.do("POST", "/v1/sessions", "alice", nil)
			want(t, r, http.StatusPreconditionFailed, "credential_missing")
			var e struct {
				Error struct{ Missing []string }
			}
			_ = json.Unmarshal(r.body, &e)
			if strings.Join(e.Error.Missing, ",") != "openai,gh" {
				t.Fatalf("missing = %v, want [openai gh]: %s", e.Error.Missing, r.body)
			}
			want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": "alice-openai-secret"}), http.StatusCreated, "")
			r = f.do("POST", "/v1/sessions", "alice", nil)
			want(t, r, http.StatusPreconditionFailed, "credential_missing")
			if !strings.Contains(string(r.body), `"missing":["gh"]`) {
				t.Fatalf("the refusal does not name gh alone: %s", r.body)
			}
			want(t, f.do("PUT", "/v1/credentials/gh", "alice", map[string]string{"value": "alice-gh-secret"}), http.StatusCreated, "")
			for who, secret := range map[string]string{"bob": "bob-openai-secret", "carol": "carol-openai-secret"} {
				want(t, f.do("PUT", "/v1/credentials/openai", who, map[string]string{"value": secret}), http.StatusCreated, "")
				want(t, f.do("PUT", "/v1/credentials/gh", who, map[string]string{"value": who + "-gh-secret"}), http.StatusCreated, "")
			}

			ids := map[string]string{}
			for _, who := range []string{"alice", "bob", "carol"} {
				ids[who] = f.open(who)
				want(t, f.say(who, ids[who], "hello"), http.StatusOK, "")
			}
			for who, id := range ids {
				env := envOf(t, d.config(id))
				if env["OPENAI_API_KEY"] != who+"-openai-secret" || env["GH_TOKEN"] != who+"-gh-secret" || len(env) != 2 {
					t.Fatalf("%s's agent got %v", who, env)
				}
			}

			// A credential deleted after the conversation opened: its agent
			// is not opened again without it.
			want(t, f.do("DELETE", "/v1/credentials/gh", "bob", nil), http.StatusNoContent, "")
			f.h.EvictIdle(context.Background())
			want(t, f.say("bob", ids["bob"], "again"), http.StatusPreconditionFailed, "credential_missing")
			want(t, f.say("alice", ids["alice"], "again"), http.StatusOK, "")
		})
	}
}

// TestCredentialsSealedAtRest: the database holds no secret in clear, a
// row copied to another person does not open for them, and keys rotate.
func TestCredentialsSealedAtRest(t *testing.T) {
	dsn := t.TempDir() + "/agentry.db"
	k1, k2 := keyLine(t, "k1"), keyLine(t, "k2")
	// One registry across the restarts: the fake keeps its
	// conversations there.
	d := newCredsDriver()
	reg, rerr := provider.OpenRegistry(context.Background(), []provider.Driver{d}, []provider.Definition{{ID: "agents", Provider: conformance.FakeKey}})
	if rerr != nil {
		t.Fatal(rerr)
	}
	t.Cleanup(func() { _ = reg.Dispose(context.Background()) })
	f := newFixture(t, config{kind: onFake, dsn: dsn, reg: reg, keepReg: true, credKeys: keyring(t, k1),
		opt: host.Options{AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "OPENAI_API_KEY"}}}})
	const secret = "sk-sealed-a1b2c3d4e5f6"
	want(t, f.do("PUT", "/v1/credentials/openai", "alice", map[string]string{"value": secret}), http.StatusCreated, "")
	want(t, f.do("PUT", "/v1/credentials/openai", "bob", map[string]string{"value": "bob's own"}), http.StatusCreated, "")

	// A row copied to bob (a database administrator's mistake, or an
	// attack): it does not open for him.
	ctx := context.Background()
	row, err := f.store.GetCredential(ctx, owners["alice"], "openai")
	if err != nil {
		t.Fatal(err)
	}
	if row.KeyID != "k1" || bytes.Contains(row.Sealed, []byte(secret)) {
		t.Fatalf("row = key %q, sealed holds the secret: %v", row.KeyID, bytes.Contains(row.Sealed, []byte(secret)))
	}
	if _, err := f.store.PutCredential(ctx, owners["bob"], row); err != nil {
		t.Fatal(err)
	}
	id := f.open("bob")
	want(t, f.say("bob", id, "hello"), http.StatusPreconditionFailed, "credential_unreadable")
	if d.config(id) != nil {
		t.Fatal("a session opened with a credential that did not open")
	}
	aliceID := f.open("alice")
	want(t, f.say("alice", aliceID, "hello"), http.StatusOK, "")
	f.shutdown()
	_ = f.store.Close()

	for _, p := range []string{dsn, dsn + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s holds the secret in clear", p)
		}
	}

	// Rotation: k2 seals from now on, k1 still opens; opening alice's
	// credential seals it again under k2.
	f2 := newFixture(t, config{kind: onFake, dsn: dsn, reg: reg, keepReg: true, credKeys: keyring(t, k2, k1),
		opt: host.Options{AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "OPENAI_API_KEY"}}}})
	want(t, f2.say("alice", aliceID, "again"), http.StatusOK, "")
	if got := envOf(t, d.config(aliceID))["OPENAI_API_KEY"]; got != secret {
		t.Fatalf("after the rotation the agent got %q", got)
	}
	row, err = f2.store.GetCredential(ctx, owners["alice"], "openai")
	if err != nil || row.KeyID != "k2" {
		t.Fatalf("after an opening the row is under key %q (%v), want k2", row.KeyID, err)
	}
	f2.shutdown()
	_ = f2.store.Close()

	// With k1 gone, what k2 sealed opens; what only k1 sealed (bob's
	// own, never opened since) is refused by name.
	f3 := newFixture(t, config{kind: onFake, dsn: dsn, reg: reg, keepReg: true, credKeys: keyring(t, k2),
		opt: host.Options{AgentCredentials: []host.AgentCredential{{Name: "openai", Var: "OPENAI_API_KEY"}}}})
	want(t, f3.say("alice", aliceID, "once more"), http.StatusOK, "")
	want(t, f3.do("PUT", "/v1/credentials/openai", "bob", map[string]string{"value": "bob's own"}), http.StatusOK, "")
	want(t, f3.say("bob", f3.open("bob"), "hello"), http.StatusOK, "")
}

func TestParseKeyring(t *testing.T) {
	good := keyLine(t, "2026-12")
	old := keyLine(t, "old_1")
	k, err := host.ParseKeyring([]byte("# agentry credentials keys\n\n" + good + old))
	if err != nil || k.Current() != "2026-12" {
		t.Fatalf("ParseKeyring = %v, %v; want the first key current", k, err)
	}
	short := "k " + base64.StdEncoding.EncodeToString([]byte("short")) + "\n"
	for name, text := range map[string]string{
		"empty":     "",
		"comments":  "# nothing\n",
		"one field": "k1\n",
		"bad id":    "k/1 " + strings.Fields(good)[1] + "\n",
		"short key": short,
		"not b64":   "k1 !!!\n",
		"twice":     good + good,
		"long line": "k1 " + strings.Repeat("A", 5000) + "\n",
	} {
		_, err := host.ParseKeyring([]byte(text))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if f := strings.Fields(good); strings.Contains(err.Error(), f[1]) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
}

func FuzzParseKeyring(f *testing.F) {
	f.Add([]byte("k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"))
	f.Add([]byte("# c\nk2 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\nk1 AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"))
	f.Add([]byte("k1 short\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := host.ParseKeyring(data)
		if err != nil {
			if k != nil {
				t.Fatal("a keyring with an error")
			}
			return
		}
		if k.Current() == "" || !bytes.Contains(data, []byte(k.Current())) {
			t.Fatalf("current key %q is not from the file", k.Current())
		}
	})
}

func FuzzValidCredentialName(f *testing.F) {
	for _, s := range []string{"openai", "gh.token", "a", "", "A", "-x", "x y", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !host.ValidCredentialName(name) {
			return
		}
		if len(name) > 64 || strings.ContainsAny(name, "/ \x00=") || strings.ToLower(name) != name {
			t.Fatalf("%q accepted", name)
		}
	})
}

// TestCredentialsPerAgent: with several agents, a conversation needs the
// credentials of the agent it is opened with, and that agent alone gets
// them; the list names what any agent needs.
func TestCredentialsPerAgent(t *testing.T) {
	k := keyring(t, keyLine(t, "k1"))
	withCreds := func(o *host.Options) {
		o.Credentials, o.CredentialKeys = o.Store.(host.CredentialStore), k
	}
	agents := func(claude, codex *provider.Instance) []host.Agent {
		a := twoAgents(claude, codex)
		a[0].Credentials = []host.AgentCredential{{Name: "anthropic", Var: "ANTHROPIC_API_KEY"}}
		return a
	}
	a := newAgentsHost(t, filepath.Join(t.TempDir(), "a.db"), nil, agents, "codex", withCreds)

	r := a.do("GET", "/v1/credentials", nil)
	want(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"agentNeeds":["anthropic"]`) {
		t.Fatalf("the list does not name what claude needs: %s", r.body)
	}
	// The default agent needs none; claude needs anthropic.
	want(t, a.do("POST", "/v1/sessions", map[string]any{}), http.StatusCreated, "")
	r = a.do("POST", "/v1/sessions", map[string]any{"agent": "claude"})
	want(t, r, http.StatusPreconditionFailed, "credential_missing")
	if !strings.Contains(string(r.body), `"missing":["anthropic"]`) {
		t.Fatalf("the refusal does not name anthropic: %s", r.body)
	}
	want(t, a.do("PUT", "/v1/credentials/anthropic", map[string]string{"value": "alice-anthropic-secret"}), http.StatusCreated, "")
	ids := map[string]string{}
	for _, name := range []string{"claude", "codex"} {
		r = a.do("POST", "/v1/sessions", map[string]any{"agent": name})
		want(t, r, http.StatusCreated, "")
		id, _ := r.json(t)["sessionId"].(string)
		ids[name] = id
		want(t, a.do("POST", "/v1/sessions/"+id+"/turns", map[string]string{"message": "hello"}), http.StatusOK, "")
	}
	claude, codex := a.drv.seen("claude"), a.drv.seen("codex")
	if len(claude) != 1 || envOf(t, json.RawMessage(claude[0]))["ANTHROPIC_API_KEY"] != "alice-anthropic-secret" {
		t.Fatalf("claude's session configurations: %q", claude)
	}
	for _, cfg := range codex {
		if strings.Contains(cfg, "anthropic") {
			t.Fatalf("codex got claude's credential: %q", codex)
		}
	}

	// Agents' credentials need the store and the keys; Options.AgentCredentials
	// is for a host of one agent.
	inst, _ := a.reg.Instance("claude")
	auth, _ := tokensFor(t, nil)
	for name, opt := range map[string]host.Options{
		"no keys":   {Agents: []host.Agent{{Name: "x", Provider: inst, Credentials: []host.AgentCredential{{Name: "a", Var: "A"}}}}},
		"host-wide": {Agents: []host.Agent{{Name: "x", Provider: inst}}, AgentCredentials: []host.AgentCredential{{Name: "a", Var: "A"}}},
		"bad var":   {Agents: []host.Agent{{Name: "x", Provider: inst, Credentials: []host.AgentCredential{{Name: "a", Var: "1A"}}}}},
	} {
		st := openStore(t, filepath.Join(t.TempDir(), "b.db"))
		opt.Store, opt.Auth, opt.EvictEvery = st, auth, -1
		if name == "bad var" {
			withCreds(&opt)
		}
		h, err := host.New(opt)
		if err == nil {
			_ = h.Shutdown(context.Background())
		}
		_ = st.Close()
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
}
