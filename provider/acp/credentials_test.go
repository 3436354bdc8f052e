package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// TestSessionCredentials: a credential the definition declares comes with
// each session's configuration, reaches that session's agent as its
// variable, and feeds the authentication method named; a session without
// it is refused by name, and none of its values is ever quoted.
func TestSessionCredentials(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config([]string{"ACP_SCRIPTED_AUTH=env"}, func(c *acp.Config) {
		c.Credentials = []acp.Credential{{Var: "SCRIPTED_KEY", Name: "scripted", AuthMethod: "scripted-key"}}
	}))
	// The probe has no person's credential: it asks for no
	// authentication, and the instance is ready.
	if got, err := inst.Readiness(context.Background()); got != provider.Ready {
		t.Fatalf("readiness %s, %v; want ready", got, err)
	}
	open := func(id string, cfg any) (*provider.ValidatedSession, error) {
		raw, _ := json.Marshal(cfg)
		s, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: id, WorkingDirectory: r.ws, Configuration: raw})
		if err == nil {
			t.Cleanup(func() { _ = s.Close(context.Background(), provider.CloseRequested) })
		}
		return s, err
	}
	_, err := open("s-none", map[string]any{})
	if !errors.Is(err, acp.ErrMissingCredentials) || !strings.Contains(err.Error(), "SCRIPTED_KEY (credential scripted)") {
		t.Fatalf("a session without its credential: %v", err)
	}
	_, err = open("s-wrong", map[string]any{"credentials": map[string]string{"SCRIPTED_KEY": "wrong-value-1234"}})
	if !errors.Is(err, acp.ErrMissingCredentials) || strings.Contains(err.Error(), "wrong-value-1234") {
		t.Fatalf("a session with a credential the agent refuses: %v", err)
	}
	_, err = open("s-extra", map[string]any{"credentials": map[string]string{"SCRIPTED_KEY": "right", "OTHER": "secret-other-99"}})
	if err == nil || !strings.Contains(err.Error(), "OTHER") || strings.Contains(err.Error(), "secret-other-99") {
		t.Fatalf("a session with an undeclared credential: %v", err)
	}
	s, err := open("s-right", map[string]any{"credentials": map[string]string{"SCRIPTED_KEY": "right"}})
	if err != nil {
		t.Fatalf("a session with its credential: %v", err)
	}
	if got := said(turn(t, s, "t1", "hello")); got == "" {
		t.Fatal("the authenticated session said nothing")
	}
}

func TestConfigCredentialsRefused(t *testing.T) {
	t.Parallel()
	base := func() acp.Config {
		return acp.Config{Command: []string{"agent"}, WorkspaceRoot: "/srv/ws", Env: []string{"OPENAI_API_KEY"},
			Credentials: []acp.Credential{{Var: "GH_TOKEN", Name: "gh"}}}
	}
	for name, edit := range map[string]func(*acp.Config){
		"pool":         func(c *acp.Config) { c.Pool = 2 },
		"in env too":   func(c *acp.Config) { c.Credentials[0].Var = "OPENAI_API_KEY" },
		"home":         func(c *acp.Config) { c.Credentials[0].Var = "HOME" },
		"bad variable": func(c *acp.Config) { c.Credentials[0].Var = "1GH" },
		"no name":      func(c *acp.Config) { c.Credentials[0].Name = "" },
		"twice":        func(c *acp.Config) { c.Credentials = append(c.Credentials, c.Credentials[0]) },
		"two methods": func(c *acp.Config) {
			c.Credentials[0].AuthMethod = "a"
			c.Credentials = append(c.Credentials, acp.Credential{Var: "X", Name: "x", AuthMethod: "b"})
		},
	} {
		c := base()
		edit(&c)
		raw, _ := json.Marshal(c)
		var ce *acp.ConfigError
		if _, err := acp.ParseConfig(raw); !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, "credentials") && ce.Field != "pool" {
			t.Errorf("%s: %v", name, err)
		}
	}
	raw, _ := json.Marshal(base())
	if _, err := acp.ParseConfig(raw); err != nil {
		t.Fatalf("the base configuration: %v", err)
	}
}
