package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// modelName is the name the checks' models answer with.
const modelName = "agenttest-model"

// script is a model that answers from the conversation alone: from the
// last user message and the tool results after it. Every executor may
// call it again (a retry, a replay on another worker) and get the same
// answer.
type script func(said string, results []llm.Message) (llm.Response, error)

func (s script) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	said := ""
	for _, m := range req.Messages {
		if m.Role == llm.RoleUser {
			said = m.Content
		}
	}
	resp, err := s(said, toolResults(req.Messages))
	if err == nil && resp.Model == "" {
		resp.Model = modelName
	}
	return resp, err
}

func answer(text string) llm.Response {
	return llm.Response{Text: text, StopReason: llm.StopEnd, Model: modelName, Usage: llm.Usage{InputTokens: 10, OutputTokens: 2}}
}

// calls asks for tool calls, each "name" or "name args".
func calls(cs ...llm.ToolCall) llm.Response {
	return llm.Response{ToolCalls: cs, StopReason: llm.StopToolUse, Model: modelName, Usage: llm.Usage{InputTokens: 10, OutputTokens: 5}}
}

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Args: json.RawMessage(args)}
}

// joined is the tool results joined by " | ".
func joined(results []llm.Message) string {
	parts := make([]string, len(results))
	for i, r := range results {
		parts[i] = r.Content
	}
	return strings.Join(parts, " | ")
}

type none struct{}

// sessions counts what tools open and close under one scope, and
// whether a cleanup ran twice.
type sessions struct {
	mu            sync.Mutex
	opened        int
	closed        int
	twice         bool
	reusedByCall  map[string]int
	approvedCalls []string
}

// hold registers a cleanup for c under scope, counting an open unless
// the door says it joined one already.
func (s *sessions) hold(c *tool.Call, scope toolsession.Scope) error {
	var once sync.Once
	cleanup := func(context.Context) error {
		ran := false
		once.Do(func() { ran = true })
		s.mu.Lock()
		defer s.mu.Unlock()
		if !ran {
			s.twice = true
			return nil
		}
		s.closed++
		return nil
	}
	out, err := c.OnTeardown(cleanup, toolsession.Options{Scope: scope, RunnerID: "agenttest"})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if out.Reused {
		if s.reusedByCall == nil {
			s.reusedByCall = map[string]int{}
		}
		s.reusedByCall[c.ToolCallID]++
	} else {
		s.opened++
	}
	return nil
}

func (s *sessions) counts() (opened, closed int, twice bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened, s.closed, s.twice
}

// scratch is a tool holding one session of scope per key.
func (s *sessions) scratch(name string, scope toolsession.Scope) tool.Tool {
	return tool.Func(name, "holds a scratch session", func(_ context.Context, c *tool.Call, _ none) (string, error) {
		if err := s.hold(c, scope); err != nil {
			return "", err
		}
		return name + " ok", nil
	})
}

// asker opens a call-scoped session, then asks a person before it goes
// on; once approved it answers "asker done".
func (s *sessions) asker() tool.Tool {
	return tool.Func("asker", "asks a person mid-call", func(ctx context.Context, c *tool.Call, _ none) (string, error) {
		if err := s.hold(c, toolsession.ScopeCall); err != nil {
			return "", err
		}
		if _, ok := tool.ApprovalFrom(ctx); !ok {
			return "", tool.CheckIn("may I drop the table?")
		}
		s.mu.Lock()
		s.approvedCalls = append(s.approvedCalls, c.ToolCallID)
		s.mu.Unlock()
		return "asker done", nil
	})
}

// counter counts its calls.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// barrier lets n calls through once all n have arrived: calls that run
// one after another never meet (each gives up after a while).
type barrier struct {
	n       int
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, all: make(chan struct{})} }

func (b *barrier) tool() tool.Tool {
	type in struct {
		N int `json:"n"`
	}
	return tool.Func("meet", "waits for the other calls of its response", func(ctx context.Context, _ *tool.Call, a in) (string, error) {
		b.mu.Lock()
		b.arrived++
		if b.arrived == b.n {
			close(b.all)
		}
		b.mu.Unlock()
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-b.all:
			return fmt.Sprintf("met %d", a.N), nil
		case <-t.C:
			return fmt.Sprintf("alone %d", a.N), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
}

// blocker says it was entered, then waits for its call's context.
func blocker(entered chan<- struct{}, s *sessions) tool.Tool {
	return tool.Func("block", "runs until stopped", func(ctx context.Context, c *tool.Call, _ none) (string, error) {
		if err := s.hold(c, toolsession.ScopeRun); err != nil {
			return "", err
		}
		entered <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	})
}
