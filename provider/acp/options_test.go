package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// An agent that lists only methods of its own (codex-acp: api-key,
// chat-gpt) is authenticated with the one the definition names, its key
// in the agent's environment; without one, opening a session says which
// methods it offers; a method it does not list is refused at readiness.
func TestAuthMethodNegotiated(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	env := []string{"ACP_SCRIPTED_AUTH=agent", "SCRIPTED_KEY=right"}

	inst := r.instance(r.config(env, func(c *acp.Config) { c.AuthMethod = "api-key" }))
	if got, err := inst.Readiness(context.Background()); got != provider.Ready {
		t.Fatalf("readiness with authMethod api-key: %s %v", got, err)
	}
	s := r.create(inst, "authed")
	if got := said(turn(t, s, "t1", "mode")); got != "mode default" {
		t.Fatalf("the authenticated session said %q", got)
	}

	for _, tc := range []struct {
		name, method, key string
		ready             provider.Readiness
		want              []string
	}{
		{"none named", "", "right", provider.Ready, []string{"authentication is required", "authMethod (--agent-auth)", "api-key, chat-gpt"}},
		{"not offered", "device", "right", provider.MissingCredentials, []string{`"device"`, "api-key, chat-gpt"}},
		{"wrong key", "api-key", "wrong", provider.MissingCredentials, []string{"api-key refused the credentials"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			inst := r.instance(r.config([]string{"ACP_SCRIPTED_AUTH=agent", "SCRIPTED_KEY=" + tc.key}, func(c *acp.Config) { c.AuthMethod = tc.method }))
			got, _ := inst.Readiness(context.Background())
			if got != tc.ready {
				t.Fatalf("readiness %s; want %s", got, tc.ready)
			}
			_, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s", WorkingDirectory: r.ws})
			if err == nil {
				t.Fatal("the session opened")
			}
			if !errors.Is(err, acp.ErrMissingCredentials) && !errors.Is(err, acp.ErrNotReady) {
				t.Errorf("the error wraps neither ErrMissingCredentials nor ErrNotReady: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "SCRIPTED_KEY=") {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
}

// The model is chosen per session through the agent's model option
// (session/set_config_option): the definition's default, a session's
// own choice over it, a model the agent does not offer refused with the
// ones it does; each opening reports what is offered and chosen.
func TestModelChosenPerSession(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Model = "large" }))

	s := r.create(inst, "default-model")
	if got := said(turn(t, s, "t1", "model")); got != "model large" {
		t.Fatalf("with the definition's model: %q", got)
	}
	open := func(id, cfg string) (*provider.ValidatedSession, error) {
		ws := filepath.Join(r.root, id)
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		return inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: id, WorkingDirectory: ws, Configuration: json.RawMessage(cfg)})
	}
	own, err := open("own-model", `{"model":"small"}`)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close(context.Background(), provider.CloseRequested)
	if got := said(turn(t, own, "t1", "model")); got != "model small" {
		t.Fatalf("with the session's model: %q", got)
	}
	_, err = open("no-such-model", `{"model":"huge"}`)
	if err == nil || !strings.Contains(err.Error(), `no model "huge"; it offers small, large`) {
		t.Fatalf("an unknown model: %v", err)
	}
	var seen []string
	for _, e := range r.events.of(acp.TypeSessionModels) {
		m := e.Payload.(*acp.SessionModels)
		if strings.Join(m.Offered, ",") != "small,large" || m.Option != "model" {
			t.Errorf("models event %+v", m)
		}
		seen = append(seen, e.Meta.SessionID+"="+m.Current)
	}
	if got := strings.Join(seen, " "); got != "default-model=large own-model=small" {
		t.Errorf("models events: %s", got)
	}
}

// The turn's trace context reaches the agent as _meta.traceparent.
func TestTraceparentReachesTheAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "traced")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	var outs []provider.Output
	for o, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "trace"}) {
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
	}
	if got, want := said(outs), "traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Fatalf("the agent saw %q; want %q", got, want)
	}
	if got := said(turn(t, s, "t2", "trace")); got != "traceparent " {
		t.Fatalf("without a span the agent saw %q", got)
	}
}

// A request the host abandons — here session/new, whose opening's
// context ends — is cancelled at the agent with $/cancel_request before
// the agent is stopped.
func TestAbandonedRequestIsCancelled(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Limits.StopTimeout = acp.Duration(5 * time.Second) }))
	if err := os.WriteFile(filepath.Join(r.ws, "slow-new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The opening is abandoned once the agent holds session/new: it says
	// so with a file call the client reports.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		wctx, stop := context.WithTimeout(ctx, time.Minute)
		defer stop()
		r.events.await(wctx, acp.TypeFile, 1)
		cancel()
	}()
	_, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "abandoned", WorkingDirectory: r.ws})
	cancel()
	<-watched
	if err == nil {
		t.Fatal("the abandoned opening succeeded")
	}
	if b, rerr := os.ReadFile(filepath.Join(r.ws, "new-cancelled")); rerr != nil || string(b) != "yes" {
		t.Fatalf("the agent did not hear session/new cancelled: %v (the opening said %v)", rerr, err)
	}
}
