package acp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// echoSpec is the one tool the tests below lend: the scripted agent's
// "tool TEXT" calls it.
var echoSpec = provider.HostToolSpec{Name: "conformance_echo", Description: "says its text back",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}

// lentCalls records which conversation's binding answered each call.
type lentCalls struct {
	mu  sync.Mutex
	got []string
}

func (c *lentCalls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// binding lends spec to one conversation, who, noting each call in c.
func (c *lentCalls) binding(who string, spec provider.HostToolSpec) *provider.HostBinding {
	return &provider.HostBinding{
		Tools: []provider.HostTool{{Name: spec.Name, Description: spec.Description, InputSchema: spec.InputSchema,
			Invoke: func(_ context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
				c.mu.Lock()
				c.got = append(c.got, who)
				c.mu.Unlock()
				out, _ := json.Marshal(who + " heard " + string(inv.Arguments))
				return provider.HostToolResult{Output: out}, nil
			}}},
		Release: func(context.Context) error { return nil },
	}
}

// awaitLending waits until n agents listing the echo tool have joined
// the pool.
func awaitLending(ctx context.Context, t *testing.T, r *rig, n int) {
	t.Helper()
	for k := 1; ; k++ {
		lending := 0
		for _, e := range r.events.await(ctx, acp.TypeAgentPooled, k) {
			if slices.Equal(e.Payload.(*acp.AgentPooled).HostTools, []string{echoSpec.Name}) {
				lending++
			}
		}
		if lending >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d pooled agents list the lent tool; want %d", lending, n)
		}
	}
}

// lendingSlots are the pool workspaces whose agent opened one session,
// with one MCP server: those waiting with the lent tools.
func lendingSlots(t *testing.T, r *rig) []string {
	t.Helper()
	slots, _ := filepath.Glob(filepath.Join(r.root, "pool-*"))
	var out []string
	for _, slot := range slots {
		if b, _ := os.ReadFile(filepath.Join(slot, ".scripted", "new")); string(b) == "new 1\n" {
			out = append(out, slot)
		}
	}
	return out
}

func sessionNews(slot string) string {
	b, _ := os.ReadFile(filepath.Join(slot, ".scripted", "new"))
	return string(b)
}

// serversOf are the MCP servers the last session/new in slot was given.
func serversOf(t *testing.T, slot string) []sdk.McpServer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(slot, ".scripted", "mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var servers []sdk.McpServer
	if err := json.Unmarshal(b, &servers); err != nil {
		t.Fatal(err)
	}
	return servers
}

// callAhead calls the echo tool as the agent in slot would, with the
// MCP server its last session/new was given.
func callAhead(ctx context.Context, t *testing.T, slot string) (string, error) {
	t.Helper()
	return callHostTool(ctx, serversOf(t, slot), "early")
}

func taken(r *rig, sessionID string) *acp.AgentTaken {
	for _, e := range r.events.of(acp.TypeAgentTaken) {
		if e.Meta.SessionID == sessionID {
			return e.Payload.(*acp.AgentTaken)
		}
	}
	return nil
}

func newConversation(t *testing.T, r *rig, name string) string {
	t.Helper()
	dir := filepath.Join(r.root, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// When the host says which tools it lends every conversation
// (ExpectHostTools), the pool's agents open their sessions ahead with an
// MCP server listing them (the agents that waited without are replaced):
// a call before a conversation takes the agent is refused; a
// conversation lending the same tools takes the session as it is, with
// no second session/new, and its calls reach its own binding only.
func TestPoolLendsTheExpectedHostToolsAhead(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Pool = 2 }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.events.await(ctx, acp.TypeAgentPooled, 1)
	if err := inst.Adapter().ExpectHostTools([]provider.HostToolSpec{echoSpec}); err != nil {
		t.Fatal(err)
	}
	awaitLending(ctx, t, r, 2)
	slots := lendingSlots(t, r)
	if len(slots) != 2 {
		t.Fatalf("pool workspaces with one session/new and one MCP server: %v; want 2", slots)
	}
	if _, err := callAhead(ctx, t, slots[0]); err == nil || !strings.Contains(err.Error(), "no conversation has taken this agent yet") {
		t.Fatalf("a call before the take: %v; want it refused", err)
	}

	var calls lentCalls
	open := func(id string) *provider.ValidatedSession {
		s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: id, WorkingDirectory: newConversation(t, r, id),
			HostBinding: calls.binding(id, echoSpec)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background(), provider.CloseRequested) })
		if tk := taken(r, id); tk == nil || tk.Reopened != "" {
			t.Fatalf("%s took %+v; want the session opened ahead, kept", id, tk)
		}
		return s
	}
	a, b := open("a"), open("b")
	for _, slot := range slots {
		if got := sessionNews(slot); got != "new 1\n" {
			t.Fatalf("after the takes, %s had session/new %q; want only the one made ahead", slot, got)
		}
	}
	if got := said(turn(t, a, "t1", "tool one")); got != `tool said: "a heard {\"text\":\"one\"}"` {
		t.Fatalf("conversation a's agent said %q", got)
	}
	if got := said(turn(t, b, "t1", "tool two")); got != `tool said: "b heard {\"text\":\"two\"}"` {
		t.Fatalf("conversation b's agent said %q", got)
	}
	if got := calls.all(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("the bindings answered %v; want a then b, each its own conversation's", got)
	}
}

// A conversation whose lent tools differ from those a pooled agent's
// session lists — other tools, or none — still takes the agent, and its
// session is opened again (said in agent_taken) with the right MCP server
// or none.
func TestPoolReopensForOtherHostTools(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Pool = 2 }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := inst.Adapter().ExpectHostTools([]provider.HostToolSpec{echoSpec}); err != nil {
		t.Fatal(err)
	}
	awaitLending(ctx, t, r, 2)
	ahead := map[string][]sdk.McpServer{}
	for _, slot := range lendingSlots(t, r) {
		ahead[slot] = serversOf(t, slot)
	}

	var calls lentCalls
	other := echoSpec
	other.Description = "says its text back, in another words"
	conv := newConversation(t, r, "other")
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "other", WorkingDirectory: conv, HostBinding: calls.binding("other", other)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background(), provider.CloseRequested)
	if tk := taken(r, "other"); tk == nil || !strings.Contains(tk.Reopened, "other host tools") {
		t.Fatalf("agent_taken %+v; want it reopened for other host tools", tk)
	}
	slot, _ := filepath.EvalSymlinks(conv)
	if got := sessionNews(slot); got != "new 1\nnew 1\n" {
		t.Fatalf("session/new calls %q; want the one ahead and one more, each with the MCP server", got)
	}
	if got := said(turn(t, s, "t1", "tool x")); got != `tool said: "other heard {\"text\":\"x\"}"` {
		t.Fatalf("the agent said %q", got)
	}
	// The server's secret the session opened ahead was given is refused
	// now; the new one is the conversation's.
	if old := ahead[slot]; len(old) != 1 || old[0].Http.Headers[0].Value == serversOf(t, slot)[0].Http.Headers[0].Value {
		t.Fatalf("the servers given ahead %+v; want one, with another secret", old)
	}
	if _, err := callHostTool(ctx, ahead[slot], "stale"); err == nil {
		t.Fatal("a call with the secret given ahead was answered")
	}
	if got, err := callAhead(ctx, t, slot); err != nil || !strings.Contains(got, "other heard") {
		t.Fatalf("a call with the server given at the take: %q %v", got, err)
	}

	bare := newConversation(t, r, "bare")
	s2, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "bare", WorkingDirectory: bare})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background(), provider.CloseRequested)
	if tk := taken(r, "bare"); tk == nil || !strings.Contains(tk.Reopened, "lends no host tools") {
		t.Fatalf("agent_taken %+v; want it reopened without host tools", tk)
	}
	slot2, _ := filepath.EvalSymlinks(bare)
	if got := sessionNews(slot2); got != "new 1\nnew 0\n" {
		t.Fatalf("session/new calls %q; want the one ahead and one without MCP servers", got)
	}
	if got := said(turn(t, s2, "t1", "tool x")); !strings.Contains(got, "no MCP server was given") {
		t.Fatalf("the agent said %q", got)
	}
	if got := calls.all(); !slices.Equal(got, []string{"other", "other"}) {
		t.Fatalf("the bindings answered %v", got)
	}
}
