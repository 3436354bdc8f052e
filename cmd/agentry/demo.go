package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		var flags sinkFlags
		cmd := &cobra.Command{
			Use:   "demo",
			Short: "A self-explaining tour of tool sessions on offline defaults",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				sinks, closeSinks, err := flags.open(cmd.Context(), cmd.ErrOrStderr())
				if err != nil {
					return failure(err)
				}
				err = runDemo(cmd.Context(), cmd.OutOrStdout(), sinks...)
				ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
				defer cancel()
				if err = errors.Join(err, closeSinks(ctx)); err != nil {
					return failure(err)
				}
				return nil
			},
		}
		flags.add(cmd)
		return cmd
	})
}

// demoClock is the injected clock the tour moves by hand.
type demoClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *demoClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *demoClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// storySink prints tool-session events as lines of the story.
type storySink struct {
	mu  sync.Mutex
	w   io.Writer
	log []event.Event
}

func (s *storySink) Export(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, e)
	switch p := e.Payload.(type) {
	case *event.ToolSession:
		verb := "opened"
		if e.Type == event.TypeSessionReused {
			verb = fmt.Sprintf("reused (call %d)", p.Calls)
		}
		fmt.Fprintf(s.w, "     · session %s %s, scope %s\n", p.KeyHash, verb, p.Scope)
	case *event.ToolSessionClosed:
		if e.Type == event.TypeSessionCloseFailed {
			fmt.Fprintf(s.w, "     ✗ session %s close FAILED (%s, %s): %s\n", p.KeyHash, p.Reason, p.ErrorClass, p.Error)
			return
		}
		fmt.Fprintf(s.w, "     ✓ session %s closed: %s, held %s\n", p.KeyHash, p.Reason, time.Duration(p.HeldMs*float64(time.Millisecond)).Round(time.Millisecond))
	}
}
func (s *storySink) Flush(context.Context) error { return nil }
func (s *storySink) Close(context.Context) error { return nil }

func (s *storySink) count(t event.Type) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.log {
		if e.Type == t {
			n++
		}
	}
	return n
}

type noteArgs struct {
	Append string `json:"append,omitempty" jsonschema:"text to add to the note"`
}

// workspaceTool keeps one scratch directory per isolation key: a real,
// if small, live resource. Opening makes the directory; the teardown
// removes it.
func workspaceTool(root string, scope toolsession.Scope, hang <-chan struct{}) tool.Tool {
	var mu sync.Mutex
	dirs := map[string]string{}
	return tool.Func("notes", "keeps a note in a private workspace", func(ctx context.Context, c *tool.Call, in noteArgs) (string, error) {
		key, err := c.Key(scope)
		if err != nil {
			return "", err
		}
		mu.Lock()
		dir, ok := dirs[key]
		if !ok {
			dir, err = os.MkdirTemp(root, "ws-")
			if err != nil {
				mu.Unlock()
				return "", err
			}
			dirs[key] = dir
		}
		mu.Unlock()
		cleanup := func(ctx context.Context) error {
			mu.Lock()
			delete(dirs, key)
			mu.Unlock()
			if hang != nil {
				select { // a Stop that hangs on a dead backend
				case <-hang:
				case <-ctx.Done():
					<-hang // and ignores its deadline
				}
			}
			return os.RemoveAll(dir)
		}
		if _, err := c.OnTeardown(cleanup, toolsession.Options{Scope: scope, Key: key, RunnerID: "tempdir", Label: "notes"}); err != nil {
			return "", err
		}
		note := filepath.Join(dir, "note.txt")
		if in.Append != "" {
			f, err := os.OpenFile(note, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return "", err
			}
			_, err = fmt.Fprintln(f, in.Append)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return "", err
			}
		}
		b, err := os.ReadFile(note)
		if errors.Is(err, os.ErrNotExist) {
			return "(empty)", nil
		}
		return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | "), err
	})
}

// door is the tour's own small door: it builds calls that register with
// one tier and emits the session events a real door emits.
type door struct {
	tier  *toolsession.Tier
	bus   *event.Bus
	clock *demoClock
	n     int
}

func (d *door) call(ctx context.Context, t tool.Tool, runID, sessionID string, id *tool.Identity, args string) string {
	d.n++
	d.clock.Advance(3 * time.Second) // a person types between calls
	callID := fmt.Sprintf("call-%d", d.n)
	register := func(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
		out := d.tier.Register(o, cleanup, opt)
		d.bus.Export(tool.SessionEvent(o, opt, out))
		return out
	}
	scopes := []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown}
	c := tool.NewCall(t.Spec().Name, callID, runID, sessionID, id, scopes, register)
	res, err := t.Call(ctx, c, []byte(args))
	d.tier.FireCall(ctx, callID) // the call's end
	if err != nil {
		return "error: " + err.Error()
	}
	return res.Content
}

func runDemo(ctx context.Context, w io.Writer, sinks ...event.Sink) error {
	root, err := os.MkdirTemp("", "agentry-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	clock := &demoClock{now: time.Now()}
	story := &storySink{w: w}
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(story, event.Filter{}); err != nil {
		return err
	}
	for _, s := range sinks {
		if err := bus.Add(s, event.Filter{}); err != nil {
			return err
		}
	}
	tier := toolsession.NewTier(toolsession.Config{
		Timeout: 300 * time.Millisecond, // short, so the hung Stop below is visible
		Idle:    15 * time.Minute,
		Now:     clock.Now,
		Report:  func(r toolsession.Report) { bus.Export(tool.CloseEvent(r)) },
	})
	d := &door{tier: tier, bus: bus, clock: clock}
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	bob := &tool.Identity{Tenant: "acme", Principal: "bob"}

	fmt.Fprintln(w, "agentry demo: tool sessions, for real, offline")
	fmt.Fprintln(w, "A \"notes\" tool keeps one scratch directory per isolation key: opening a session")
	fmt.Fprintln(w, "makes the directory, its teardown removes it. Keys are shown only as their hash.")

	fmt.Fprintln(w, "\n1. Two users, one tool, the same session id sent by both")
	runScoped := workspaceTool(root, toolsession.ScopeSession, nil)
	fmt.Fprintf(w, "   alice writes: %q\n", d.call(ctx, runScoped, "run-a1", "conv-1", alice, `{"append":"alice's secret plan"}`))
	fmt.Fprintf(w, "   bob reads:    %q  (his own workspace: tenant and principal are in the key)\n", d.call(ctx, runScoped, "run-b1", "conv-1", bob, `{}`))

	fmt.Fprintln(w, "\n2. Reuse: alice calls again in the same conversation")
	fmt.Fprintf(w, "   alice reads:  %q\n", d.call(ctx, runScoped, "run-a2", "conv-1", alice, `{"append":"step two"}`))

	fmt.Fprintln(w, "\n3. A close by each scope")
	callScoped := workspaceTool(root, toolsession.ScopeCall, nil)
	fmt.Fprintln(w, "   call scope: the session ends with the call")
	d.call(ctx, callScoped, "run-a3", "conv-1", alice, `{"append":"scratch"}`)
	fmt.Fprintln(w, "   run scope: the session ends at the run's terminal")
	runTool := workspaceTool(root, toolsession.ScopeRun, nil)
	d.call(ctx, runTool, "run-a4", "conv-1", alice, `{"append":"for this run"}`)
	d.call(ctx, runTool, "run-a4", "conv-1", alice, `{}`)
	tier.FireRun(ctx, "run-a4")
	fmt.Fprintln(w, "   session scope: the host closes alice's conversation")
	n := tier.FireSession(ctx, "conv-1", toolsession.ReasonSessionEnd)
	fmt.Fprintf(w, "   (closing conv-1 closed %d sessions: alice's and bob's)\n", n)

	fmt.Fprintln(w, "\n4. Idle expiry with an injected clock (no timer: the sweep runs on the next use)")
	d.call(ctx, runScoped, "run-b2", "conv-2", bob, `{"append":"left open"}`)
	clock.Advance(16 * time.Minute)
	fmt.Fprintln(w, "   16 minutes pass; alice's next call sweeps bob's idle session first")
	d.call(ctx, runScoped, "run-a5", "conv-3", alice, `{}`)
	if err := tier.Settled(ctx); err != nil {
		return err
	}

	fmt.Fprintln(w, "\n5. A Stop that hangs and ignores its deadline")
	hang := make(chan struct{})
	defer close(hang)
	hung := workspaceTool(root, toolsession.ScopeRun, hang)
	d.call(ctx, hung, "run-h", "", bob, `{}`)
	start := time.Now()
	tier.FireRun(ctx, "run-h")
	fmt.Fprintf(w, "   the tier stopped waiting after %s and reported it\n", time.Since(start).Round(50*time.Millisecond))

	fmt.Fprintln(w, "\n6. Shutdown closes whatever is left")
	tier.FireShutdown(ctx)

	opened := story.count(event.TypeSessionStarted)
	closed := story.count(event.TypeSessionClosed)
	failed := story.count(event.TypeSessionCloseFailed)
	fmt.Fprintf(w, "\nSummary: %d sessions opened, %d reused, %d closed, %d failed to close (reported), %d still live.\n",
		opened, story.count(event.TypeSessionReused), closed, failed, tier.Live())
	if opened != closed+failed || tier.Live() != 0 {
		return fmt.Errorf("demo: %d sessions opened but %d closed and %d failed", opened, closed, failed)
	}
	return nil
}
