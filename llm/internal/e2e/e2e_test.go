package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/anthropic"
	"github.com/agentry-dev/agentry/llm/openai"
	"github.com/agentry-dev/agentry/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	anthropicKey = "sk-ant-api03-E2E-0123456789abcdefghij"
	openaiKey    = "sk-proj-E2E-abcdefghijklmnopqrstuvwxyz"
)

// needPython skips, loudly, where there is no python3 — except in CI,
// which must have it.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is missing and CI=true: install python3 (Debian: apt-get install python3)")
		}
		t.Skip("LOUD: python3 is not on PATH; the end-to-end run_code tests need it (apt-get install python3)")
	}
}

// recorder is an event sink that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Export(e event.Event)        { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() }
func (r *recorder) Flush(context.Context) error { return nil }
func (r *recorder) Close(context.Context) error { return nil }

func (r *recorder) all() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// generateOnly hides a model's streaming, so the agent calls Generate.
type generateOnly struct{ llm.Model }

type vendor struct {
	name  string
	start func(modelwire.Options) *modelwire.Server
	model func(t *testing.T, srv *modelwire.Server) llm.Model
	key   string
}

var vendors = []vendor{
	{
		name:  "anthropic",
		start: modelwire.NewAnthropic,
		key:   anthropicKey,
		model: func(t *testing.T, srv *modelwire.Server) llm.Model {
			m, err := anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", APIKey: anthropicKey, BaseURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	},
	{
		name:  "openai",
		start: modelwire.NewOpenAI,
		key:   openaiKey,
		model: func(t *testing.T, srv *modelwire.Server) llm.Model {
			m, err := openai.New(openai.Options{Model: "gpt-4o-mini", APIKey: openaiKey, BaseURL: srv.URL + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	},
}

// The bar: agent.Run with each provider against its local server
// completes a two-step tool-calling turn with the real run_code tool — the
// model asks for print(6*7), the tool runs it, and the answer carries the
// 42 it printed.
func TestTwoStepTurnWithRealRunCode(t *testing.T) {
	needPython(t)
	runners := map[string]func() code.Runner{
		"interpreter": func() code.Runner { return local.NewInterpreter(local.Options{Dir: t.TempDir()}) },
		"process":     func() code.Runner { return local.New(local.Options{Dir: t.TempDir()}) },
	}
	for _, v := range vendors {
		for _, streaming := range []bool{true, false} {
			for rname, newRunner := range runners {
				name := v.name + "/" + map[bool]string{true: "stream", false: "generate"}[streaming] + "/" + rname
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					srv := v.start(modelwire.Options{APIKey: v.key})
					defer srv.Close()
					var m llm.Model = v.model(t, srv)
					if !streaming {
						m = generateOnly{m}
					}
					rec := &recorder{}
					a, err := agent.New(agent.Options{
						ID:     "e2e",
						Model:  m,
						System: "Use run_code to compute.",
						Tools:  []tool.Tool{code.NewTool(newRunner(), code.ToolOptions{})},
						Sinks:  []event.Sink{rec},
					})
					if err != nil {
						t.Fatal(err)
					}
					ctx := context.Background()
					res, err := a.Run(ctx, agent.Input{Message: "What is 6*7? Use run_code."})
					if err != nil {
						t.Fatal(err)
					}
					if err := a.Shutdown(ctx); err != nil {
						t.Fatal(err)
					}
					if res.Output != "run_code printed: 42" {
						t.Fatalf("answer %q, want the model to relay the 42 the code printed", res.Output)
					}
					reqs := srv.Requests()
					if len(reqs) != 2 {
						t.Fatalf("%d requests, want 2 (the tool call, then the answer)", len(reqs))
					}
					if !slices.Contains(reqs[0].Tools, "run_code") || reqs[0].Stream != streaming || reqs[1].Stream != streaming {
						t.Fatalf("first request: tools %v, stream %v", reqs[0].Tools, reqs[0].Stream)
					}
					if len(reqs[1].ToolResults) != 1 || strings.TrimSpace(reqs[1].ToolResults[0]) != "42" {
						t.Fatalf("the second request carries tool results %q, want the code's 42", reqs[1].ToolResults)
					}
					if strings.Contains(string(reqs[0].Body), v.key) {
						t.Fatal("the API key travelled in the request body")
					}
					checkEvents(t, rec.all(), res.RunID)
					if n := a.LiveToolSessions(); n != 0 {
						t.Fatalf("%d tool sessions live after shutdown", n)
					}
					msgs := res.Conversation.Messages
					if len(msgs) != 4 || msgs[1].ToolCalls[0].Name != "run_code" || msgs[2].Role != llm.RoleTool || msgs[3].Content != res.Output {
						t.Fatalf("conversation %+v", msgs)
					}
				})
			}
		}
	}
}

// checkEvents: the run opened one run_code session, ran the code once
// successfully, closed the session at the run's end before its turn_end,
// and answered.
func checkEvents(t *testing.T, evs []event.Event, runID string) {
	t.Helper()
	var order []string
	for _, e := range evs {
		if e.Meta.RunID != runID {
			t.Fatalf("event %s of run %q, want %q", e.Type, e.Meta.RunID, runID)
		}
		switch p := e.Payload.(type) {
		case *code.RunReport:
			if !p.OK || p.Language != "python" || p.ShapeHash == "" {
				t.Fatalf("code_run %+v", p)
			}
			order = append(order, "code_run")
		case *tool.SessionClosed:
			order = append(order, string(e.Type)+":"+p.Reason)
		case *event.TurnEnd:
			order = append(order, "turn_end:"+p.Outcome)
		case *tool.SessionOpened:
			order = append(order, string(e.Type))
		}
	}
	want := []string{string(tool.TypeSessionStarted), "code_run", string(tool.TypeSessionClosed) + ":run-end", "turn_end:answer"}
	if !slices.Equal(order, want) {
		t.Fatalf("events %v, want %v", order, want)
	}
}

// A program that fails reaches the model as an error result, and the
// answer says so: Anthropic's is_error flag, OpenAI's plain content.
func TestFailingCodeReachesTheModel(t *testing.T) {
	needPython(t)
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			srv := v.start(modelwire.Options{APIKey: v.key, Code: func(string) string { return "print(1/0)" }})
			defer srv.Close()
			a, err := agent.New(agent.Options{
				Model: v.model(t, srv),
				Tools: []tool.Tool{code.NewTool(local.NewInterpreter(local.Options{Dir: t.TempDir()}), code.ToolOptions{})},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Shutdown(context.Background())
			res, err := a.Run(context.Background(), agent.Input{Message: "divide by zero"})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Output, "ZeroDivisionError") {
				t.Fatalf("answer %q lacks the traceback's error", res.Output)
			}
			wantVerb := "printed"
			if v.name == "anthropic" {
				wantVerb = "failed with" // is_error travelled
			}
			if !strings.HasPrefix(res.Output, "run_code "+wantVerb+":") {
				t.Fatalf("answer %q, want %q", res.Output, wantVerb)
			}
		})
	}
}
