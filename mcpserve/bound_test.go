package mcpserve_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// blockRunner is a code runner whose sessions run "block" until the test
// releases them, and count every execution, so a re-run would show.
type blockRunner struct {
	entered chan struct{}
	release chan struct{}

	mu            sync.Mutex
	starts, execs int
}

func newBlockRunner() *blockRunner {
	return &blockRunner{entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (r *blockRunner) ID() string { return "block" }

func (r *blockRunner) Start(context.Context, code.StartRequest) (code.Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	return &blockSession{r: r, id: fmt.Sprint("block-", r.starts)}, nil
}

func (r *blockRunner) counts() (starts, execs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts, r.execs
}

type blockSession struct {
	r  *blockRunner
	id string
}

func (s *blockSession) ID() string { return s.id }

func (s *blockSession) Execute(ctx context.Context, req code.ExecRequest) (code.Result, error) {
	s.r.mu.Lock()
	s.r.execs++
	s.r.mu.Unlock()
	if req.Code == "block" {
		s.r.entered <- struct{}{}
		select {
		case <-s.r.release:
		case <-ctx.Done():
			return code.Result{}, context.Cause(ctx)
		}
	}
	zero := 0
	return code.Result{OK: true, Stdout: s.id + " ran " + req.Code, ExitCode: &zero}, nil
}

func (s *blockSession) Stop(context.Context) error { return nil }

// callsAtOnce makes n concurrent run_code calls of src and returns their
// results once all are back.
func callsAtOnce(t *testing.T, cs *mcp.ClientSession, n int, src string) <-chan []*mcp.CallToolResult {
	t.Helper()
	out := make(chan []*mcp.CallToolResult, 1)
	go func() {
		res := make([]*mcp.CallToolResult, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": src}})
				if err != nil {
					t.Errorf("call %d: %v", i, err)
					r = &mcp.CallToolResult{IsError: true}
				}
				res[i] = r
			})
		}
		wg.Wait()
		out <- res
	}()
	return out
}

func TestMoreConcurrentCallsThanTheBoundAreRefusedNamingItAndNoneIsRerun(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	r := newBlockRunner()
	tl := code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeCall})
	s := newServer(t, []tool.Tool{tl}, rec.options(mcpserve.Options{MaxCalls: 4}))
	cs := connect(t, s)

	all := callsAtOnce(t, cs, 7, "block")
	for range 4 {
		<-r.entered
	}
	// The three past the bound come back without running; the four keep
	// running until released.
	wait, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	rec.waitFor(t, wait, "three refusals", func() bool {
		n := 0
		for _, e := range rec.events {
			if p, ok := e.Payload.(*tool.CallEnd); ok && p.ErrorClass == "capacity" {
				n++
			}
		}
		return n == 3
	})
	close(r.release)
	refused, ran := 0, 0
	for _, res := range <-all {
		txt := text(t, res)
		switch {
		case res.IsError && strings.Contains(txt, "runs 4 calls at once") && strings.Contains(txt, "--max-calls") && strings.Contains(txt, "nothing was run"):
			refused++
		case !res.IsError && strings.HasSuffix(txt, "ran block"):
			ran++
		default:
			t.Errorf("unexpected result (error %v): %s", res.IsError, txt)
		}
	}
	starts, execs := r.counts()
	if refused != 3 || ran != 4 || starts != 4 || execs != 4 {
		t.Fatalf("refused %d, ran %d, %d starts, %d executions; want 3 refused, 4 ran once each, nothing re-run", refused, ran, starts, execs)
	}
	// The bound frees as calls end.
	if res := call(t, cs, "run_code", map[string]any{"code": "print(1)"}); res.IsError {
		t.Fatalf("a call after the others ended: %s", text(t, res))
	}
}

func TestEverySessionBusyIsAToolErrorNamingTheBound(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	r := newBlockRunner()
	tl := code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeCall})
	s := newServer(t, []tool.Tool{tl}, rec.options(mcpserve.Options{MaxCalls: 8, MaxLiveSessions: 2, SessionWait: -1}))
	cs := connect(t, s)

	busy := callsAtOnce(t, cs, 2, "block")
	<-r.entered
	<-r.entered
	res := call(t, cs, "run_code", map[string]any{"code": "print(1)"})
	txt := text(t, res)
	if !res.IsError || !strings.Contains(txt, "all 2 live sessions") || !strings.Contains(txt, "MaxLive") {
		t.Fatalf("a call while every session is busy: error %v, %q; want a tool error naming the bound", res.IsError, txt)
	}
	if starts, _ := r.counts(); starts != 2 {
		t.Fatalf("%d starts; a refused call must start nothing", starts)
	}
	caps := rec.ofType(tool.TypeSessionCapacity)
	if len(caps) != 1 || caps[0].Payload.(*tool.SessionCapacity).Outcome != tool.CapacityRefused {
		t.Fatalf("session_capacity events %+v; want one refusal", caps)
	}
	close(r.release)
	for _, res := range <-busy {
		if res.IsError || !strings.HasSuffix(text(t, res), "ran block") {
			t.Fatalf("a busy call was cut: %s", text(t, res))
		}
	}
	for _, rep := range rec.allReports() {
		if rep.Reason == toolsession.ReasonEvicted {
			t.Fatalf("a session with a call in flight was evicted: %+v", rep)
		}
	}
	if _, execs := r.counts(); execs != 2 {
		t.Fatalf("%d executions for two calls", execs)
	}
}
