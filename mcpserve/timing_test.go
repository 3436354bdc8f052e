package mcpserve_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// A cleanup that ignores its context is abandoned after the teardown
// timeout, and that is reported, not swallowed. The fake clock of the
// bubble makes the timeout exact and instant.
func TestHangingCleanupIsReportedAsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		st := newSessionTool()
		release := make(chan struct{})
		st.cleanup = func(context.Context) error { <-release; return nil }
		const timeout = 3 * time.Second
		s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{TeardownTimeout: timeout}))
		cs := connect(t, s)

		start := time.Now()
		res := call(t, cs, "session", nil)
		if took := time.Since(start); took != timeout {
			t.Errorf("the result came after %s; a hanging cleanup should hold it exactly the timeout, %s", took, timeout)
		}
		if res.IsError {
			t.Errorf("the call's result became an error: %s", text(t, res))
		}
		errs := rec.errors()
		if len(errs) != 1 {
			t.Fatalf("OnError got %v, want one timeout", errs)
		}
		var te *toolsession.TimeoutError
		if !errors.As(errs[0], &te) || te.Timeout != timeout || te.Tool != "session" {
			t.Errorf("error %v does not carry the *toolsession.TimeoutError", errs[0])
		}
		if !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) is false", errs[0])
		}
		asTeardown(t, errs[0])
		failed := rec.ofType(tool.TypeSessionCloseFailed)
		if len(failed) != 1 || failed[0].Payload.(*tool.SessionClosed).ErrorClass != "timeout" {
			t.Errorf("close_failed events %+v, want one of class timeout", failed)
		}
		close(release)
	})
}

func TestPanickingCleanupIsReported(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	st := newSessionTool()
	st.cleanup = func(context.Context) error { panic("stop crashed") }
	s := newServer(t, []tool.Tool{st.tool()}, rec.options(mcpserve.Options{}))
	cs := connect(t, s)

	if res := call(t, cs, "session", nil); res.IsError {
		t.Errorf("result %s", text(t, res))
	}
	errs := rec.errors()
	var pe *toolsession.PanicError
	if len(errs) != 1 || !errors.As(errs[0], &pe) {
		t.Fatalf("OnError got %v, want a teardown panic", errs)
	}
	failed := rec.ofType(tool.TypeSessionCloseFailed)
	if len(failed) != 1 || failed[0].Payload.(*tool.SessionClosed).ErrorClass != "panic" {
		t.Errorf("close_failed events %+v", failed)
	}
}

// With no OnError, failures still go somewhere: slog's default logger. Not
// parallel: it swaps the process's default logger.
func TestFailuresAreLoggedWithoutAnErrorHook(t *testing.T) {
	var log lockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	st := newSessionTool()
	st.cleanup = func(context.Context) error { return errors.New("nobody listening") }
	var got atomic.Int32
	s := newServer(t, []tool.Tool{st.tool()}, mcpserve.Options{
		// A hook that panics must not take the door down either.
		OnEvent: func(e event.Event) {
			if e.Type == tool.TypeSessionCloseFailed {
				got.Add(1)
				panic("a broken hook")
			}
		},
	})
	cs := connect(t, s)
	if res := call(t, cs, "session", nil); res.IsError {
		t.Errorf("result %s", text(t, res))
	}
	if got.Load() != 1 {
		t.Errorf("the hook saw %d close_failed events", got.Load())
	}
	out := log.String()
	for _, want := range []string{"nobody listening", "the OnEvent hook panicked (recovered): a broken hook"} {
		if !strings.Contains(out, want) {
			t.Errorf("the default log lacks %q:\n%s", want, out)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Shutdown lets calls in flight finish, refuses new ones meanwhile, and
// closes what was held.
func TestShutdownDrainsThenRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		proceed := make(chan struct{})
		var closes atomic.Int32
		slow := tool.Func("slow", "holds a session until told", func(ctx context.Context, c *tool.Call, _ noArgs) (string, error) {
			if _, err := c.OnTeardown(func(context.Context) error { closes.Add(1); return nil }, toolsession.Options{Scope: toolsession.ScopeCall}); err != nil {
				return "", err
			}
			<-proceed
			return "finished", nil
		})
		s := newServer(t, []tool.Tool{slow, probe()}, rec.options(mcpserve.Options{}))
		cs := connect(t, s)

		first := make(chan *mcp.CallToolResult, 1)
		go func() { first <- call(t, cs, "slow", nil) }()
		synctest.Wait() // the call is in flight
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		synctest.Wait() // Shutdown is draining

		res := call(t, cs, "probe", nil)
		if !res.IsError || !strings.Contains(text(t, res), "shutting down") {
			t.Errorf("a call during the drain: %+v, want a refusal", text(t, res))
		}
		close(proceed)
		if got := <-first; got.IsError || text(t, got) != "finished" {
			t.Errorf("the call in flight: %s", text(t, got))
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if closes.Load() != 1 {
			t.Errorf("cleanup ran %d times", closes.Load())
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("a second Shutdown: %v", err)
		}
	})
}

// When the drain bound ends, calls are cancelled with ErrShutdown; a tool
// that ignores that still has its session closed, by the shutdown firing,
// exactly once; and Shutdown returns within its bounds saying what was
// late.
func TestShutdownCancelsAndFiresWhatIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		st := newSessionTool() // mode block: honours cancellation
		release := make(chan struct{})
		var stubbornCloses atomic.Int32
		stubborn := tool.Func("stubborn", "ignores cancellation", func(_ context.Context, c *tool.Call, _ noArgs) (string, error) {
			if _, err := c.OnTeardown(func(context.Context) error { stubbornCloses.Add(1); return nil }, toolsession.Options{Scope: toolsession.ScopeCall}); err != nil {
				return "", err
			}
			<-release
			return "late", nil
		})
		const timeout = 2 * time.Second
		s, err := mcpserve.New([]tool.Tool{st.tool(), stubborn}, rec.options(mcpserve.Options{TeardownTimeout: timeout}))
		if err != nil {
			t.Fatal(err)
		}
		cs := connect(t, s)

		go func() {
			_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session", Arguments: map[string]any{"mode": "block"}})
		}()
		go func() { _, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "stubborn"}) }()
		<-st.started
		synctest.Wait()

		drain, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err = s.Shutdown(drain)
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "2 calls were still running") || !strings.Contains(err.Error(), "1 did not return within 2s") {
			t.Errorf("Shutdown: %v, want it to say what was late", err)
		}
		if want := time.Second + timeout; took != want {
			t.Errorf("Shutdown took %s, want the drain bound plus one teardown timeout, %s", took, want)
		}
		if cause := <-st.observed; !errors.Is(cause, mcpserve.ErrShutdown) {
			t.Errorf("the cancelled call saw cause %v, want ErrShutdown", cause)
		}
		if st.closes.Load() != 1 || stubbornCloses.Load() != 1 {
			t.Errorf("closes: cooperative %d, stubborn %d; want 1 and 1", st.closes.Load(), stubbornCloses.Load())
		}
		reasons := map[toolsession.Reason]int{}
		for _, r := range rec.allReports() {
			reasons[r.Reason]++
		}
		if reasons[toolsession.ReasonCallEnd] != 1 || reasons[toolsession.ReasonShutdown] != 1 {
			t.Errorf("close reasons %v, want one call-end and one shutdown", reasons)
		}

		close(release) // the stubborn call settles now; its session is gone already
		synctest.Wait()
		if stubbornCloses.Load() != 1 {
			t.Errorf("the stubborn call's cleanup ran %d times", stubbornCloses.Load())
		}
		_ = cs.Close()
	})
}
