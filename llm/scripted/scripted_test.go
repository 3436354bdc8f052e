package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func conversation(assistants int) []llm.Message {
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "go"}}
	for i := range assistants {
		msgs = append(msgs,
			llm.Message{Role: llm.RoleAssistant, Content: fmt.Sprint("a", i)},
			llm.Message{Role: llm.RoleTool, Content: "r"},
			llm.Message{Role: llm.RoleUser, Content: "more"})
	}
	return msgs
}

func TestTheStepIsTheNumberOfAssistantMessages(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{Text: "zero"},
		scripted.Step{ToolCalls: []llm.ToolCall{{Name: "t"}, {ID: "mine", Name: "u", Args: json.RawMessage(`{"x":1}`)}}},
		scripted.Step{Text: "two"},
	)
	// Out of order on purpose: nothing but the request decides the step.
	for _, n := range []int{2, 0, 1, 0, 2} {
		r, err := m.Generate(context.Background(), llm.Request{Messages: conversation(n)})
		if err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		switch n {
		case 0, 2:
			want := map[int]string{0: "zero", 2: "two"}[n]
			if r.Text != want || r.StopReason != llm.StopEnd || r.ToolCalls != nil {
				t.Fatalf("step %d: %+v", n, r)
			}
		case 1:
			if r.StopReason != llm.StopToolUse || len(r.ToolCalls) != 2 {
				t.Fatalf("step 1: %+v", r)
			}
			if r.ToolCalls[0].ID != "call_1_0" || string(r.ToolCalls[0].Args) != "{}" {
				t.Fatalf("a call without id or args gets call_<step>_<i> and {}: %+v", r.ToolCalls[0])
			}
			if r.ToolCalls[1].ID != "mine" || string(r.ToolCalls[1].Args) != `{"x":1}` {
				t.Fatalf("given ids and args are kept: %+v", r.ToolCalls[1])
			}
		}
	}
	if m.Name() != "scripted" || m.Len() != 3 {
		t.Fatalf("name %q len %d", m.Name(), m.Len())
	}
}

func TestRunningOutOfStepsSaysSo(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "only"})
	_, err := m.Generate(context.Background(), llm.Request{Messages: conversation(1)})
	if !errors.Is(err, scripted.ErrOutOfSteps) {
		t.Fatalf("err = %v, want ErrOutOfSteps", err)
	}
	if !strings.Contains(err.Error(), "step 2") || !strings.Contains(err.Error(), "has 1") || !strings.Contains(err.Error(), "add steps") {
		t.Fatalf("the error must say which step, how many there are, and the fix: %v", err)
	}
	if _, err := scripted.New().Generate(context.Background(), llm.Request{}); !errors.Is(err, scripted.ErrOutOfSteps) {
		t.Fatalf("an empty script: %v", err)
	}
}

func TestGenerateHonoursACancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := scripted.New(scripted.Step{Text: "x"}).Generate(ctx, llm.Request{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if _, err := scripted.Calculator().Generate(ctx, llm.Request{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("calculator err = %v", err)
	}
}

func TestCallersCannotChangeTheScript(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{ToolCalls: []llm.ToolCall{{ID: "a", Name: "t"}}})
	r, _ := m.Generate(context.Background(), llm.Request{})
	r.ToolCalls[0].ID = "changed"
	r2, _ := m.Generate(context.Background(), llm.Request{})
	if r2.ToolCalls[0].ID != "a" {
		t.Fatal("a caller changing a response changed the script")
	}
}

func TestConcurrentConversationsEachGetTheirStep(t *testing.T) {
	t.Parallel()
	var steps []scripted.Step
	for i := range 10 {
		steps = append(steps, scripted.Step{Text: fmt.Sprint(i)})
	}
	m := scripted.New(steps...)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 100 {
		wg.Go(func() {
			n := g % 10
			r, err := m.Generate(context.Background(), llm.Request{Messages: conversation(n)})
			if err != nil || r.Text != fmt.Sprint(n) {
				errs <- fmt.Errorf("conversation at step %d got %q, %v", n, r.Text, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStreamingYieldsTheSameResponse(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "one two three", ToolCalls: []llm.ToolCall{{Name: "t"}}})
	s := m.Streaming()
	var _ llm.Streamer = s
	var text strings.Builder
	var calls, chunks int
	for c, err := range s.Stream(context.Background(), llm.Request{}) {
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		text.WriteString(c.Text)
		if c.ToolCall != nil {
			calls++
		}
	}
	if text.String() != "one two three" || calls != 1 || chunks != 5 {
		t.Fatalf("text %q calls %d chunks %d", text.String(), calls, chunks)
	}
	got, err := llm.Collect(s.Stream(context.Background(), llm.Request{}))
	want, _ := m.Generate(context.Background(), llm.Request{})
	if err != nil || got.Text != want.Text || len(got.ToolCalls) != 1 || got.StopReason != llm.StopToolUse {
		t.Fatalf("collected %+v, %v", got, err)
	}
	for range s.Stream(context.Background(), llm.Request{}) {
		break // stopping early is allowed
	}
	_, err = llm.Collect(scripted.New().Streaming().Stream(context.Background(), llm.Request{}))
	if !errors.Is(err, scripted.ErrOutOfSteps) {
		t.Fatalf("streaming past the script: %v", err)
	}
}

var runCode = []llm.ToolDef{{Name: "run_code"}}

func TestCalculatorRunsTheCodeAndAnswersWithWhatItPrinted(t *testing.T) {
	t.Parallel()
	c := scripted.Calculator()
	if !strings.Contains(c.Name(), "not a language model") {
		t.Fatalf("the calculator must say what it is: %q", c.Name())
	}
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "Please run this:\n```python\nprint(6*7)\n```\nthanks"}}
	r, err := c.Generate(context.Background(), llm.Request{Messages: msgs, Tools: runCode})
	if err != nil || len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "run_code" {
		t.Fatalf("%+v %v", r, err)
	}
	var args struct{ Code string }
	if err := json.Unmarshal(r.ToolCalls[0].Args, &args); err != nil || args.Code != "print(6*7)" {
		t.Fatalf("args %s: %v", r.ToolCalls[0].Args, err)
	}
	msgs = append(msgs,
		llm.Message{Role: llm.RoleAssistant, ToolCalls: r.ToolCalls},
		llm.Message{Role: llm.RoleTool, ToolCallID: r.ToolCalls[0].ID, Content: "42\n"})
	r, err = c.Generate(context.Background(), llm.Request{Messages: msgs, Tools: runCode})
	if err != nil || r.Text != "42" || len(r.ToolCalls) != 0 {
		t.Fatalf("answer %+v %v", r, err)
	}
	msgs[len(msgs)-1].IsError = true
	msgs[len(msgs)-1].Content = "NameError"
	r, _ = c.Generate(context.Background(), llm.Request{Messages: msgs, Tools: runCode})
	if !strings.Contains(r.Text, "could not run") || !strings.Contains(r.Text, "NameError") {
		t.Fatalf("a failed run is stated: %q", r.Text)
	}
}

func TestCalculatorRefusesWithoutRunCode(t *testing.T) {
	t.Parallel()
	_, err := scripted.Calculator().Generate(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "1+1"}}})
	if err == nil || !strings.Contains(err.Error(), "run_code") {
		t.Fatalf("err = %v", err)
	}
	_, err = scripted.Calculator().Generate(context.Background(), llm.Request{Tools: runCode})
	if err == nil {
		t.Fatal("no messages must be an error")
	}
	_, err = scripted.Calculator().Generate(context.Background(), llm.Request{Tools: runCode,
		Messages: []llm.Message{{Role: llm.RoleAssistant, Content: "x"}}})
	if err == nil {
		t.Fatal("an assistant message last must be an error")
	}
	r, err := scripted.Calculator().Generate(context.Background(), llm.Request{Tools: runCode,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "```\n\n```"}}})
	if err != nil || !strings.Contains(r.Text, "not a language model") {
		t.Fatalf("an empty fence is answered honestly: %+v %v", r, err)
	}
}

func TestExtractCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		msg, code string
		ok        bool
	}{
		{"```python\nprint(1)\n```", "print(1)", true},
		{"text\n```\na = 1\nprint(a)\n```\n```\nsecond\n```", "a = 1\nprint(a)", true},
		{"```print(2)```", "print(2)", true},
		{"```py\nunclosed()", "unclosed()", true},
		{"print('bare')", "print('bare')", true},
		{"  2 + 2*3  ", "print(2 + 2*3)", true},
		{"(1.5 - 0.5) / 2", "print((1.5 - 0.5) / 2)", true},
		{"+-", "+-", true},
		{"", "", false},
		{"   \n ", "", false},
		{"```\n  \n```", "", false},
	}
	for _, tt := range tests {
		code, ok := scripted.ExtractCode(tt.msg)
		if code != tt.code || ok != tt.ok {
			t.Errorf("ExtractCode(%q) = %q, %v; want %q, %v", tt.msg, code, ok, tt.code, tt.ok)
		}
	}
}

func FuzzExtractCode(f *testing.F) {
	for _, s := range []string{"```python\nprint(1)\n```", "1+1", "```", "``````", "a```b\nc```d", "\n```\n```\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		code, ok := scripted.ExtractCode(msg)
		if ok != (strings.TrimSpace(code) != "") {
			t.Fatalf("ok %v for code %q", ok, code)
		}
		if ok && !strings.Contains(msg, "```") && !strings.Contains(msg, strings.TrimPrefix(strings.TrimSuffix(code, ")"), "print(")) {
			t.Fatalf("a bare program must come from the message: %q from %q", code, msg)
		}
		if strings.Contains(msg, "```") && strings.Contains(code, "```") {
			t.Fatalf("the fence leaked into the code: %q", code)
		}
	})
}
