// Command testserver serves two small tools over MCP on stdio, for tests
// that drive the door from another MCP client (the TypeScript SDK's).
//
//	whoami   reports what the door told the tool about its call
//	scratch  makes a scratch directory for one call and registers its
//	         removal as a call-scoped cleanup; "scope" asks for another
//	         scope, which the door refuses by name
//
// With -events FILE it appends every event the door emits to FILE, one JSON
// object a line, written as it happens so nothing is lost if the process
// is killed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

type facts struct {
	ToolCallID string              `json:"toolCallId"`
	RunID      string              `json:"runId"`
	SessionID  string              `json:"sessionId"`
	Identity   *tool.Identity      `json:"identity"`
	Scopes     []toolsession.Scope `json:"scopes"`
}

type whoamiArgs struct{}

type scratchArgs struct {
	Text  string `json:"text" jsonschema:"what to write into the scratch file"`
	Scope string `json:"scope,omitempty" jsonschema:"teardown scope to ask for (default call)"`
}

type scratchOut struct {
	Dir   string `json:"dir"`
	Bytes int    `json:"bytes"`
}

func tools() []tool.Tool {
	whoami := tool.Func("whoami", "Reports what the door told this tool about its call.",
		func(_ context.Context, c *tool.Call, _ whoamiArgs) (facts, error) {
			return facts{ToolCallID: c.ToolCallID, RunID: c.RunID, SessionID: c.SessionID, Identity: c.Identity, Scopes: c.Scopes}, nil
		})
	scratch := tool.Func("scratch", "Writes text into a scratch directory that lives for one call.",
		func(_ context.Context, c *tool.Call, a scratchArgs) (scratchOut, error) {
			scope := toolsession.Scope(a.Scope)
			if scope == "" {
				scope = toolsession.ScopeCall
			}
			// Ask first, open second: a refused scope opens nothing.
			dir := new(string)
			if _, err := c.OnTeardown(func(context.Context) error {
				if *dir == "" {
					return nil
				}
				return os.RemoveAll(*dir)
			}, toolsession.Options{Scope: scope, RunnerID: "scratch-dir", Label: "dir"}); err != nil {
				return scratchOut{}, err
			}
			d, err := os.MkdirTemp("", "agentry-scratch-*")
			if err != nil {
				return scratchOut{}, fmt.Errorf("scratch: cannot make a directory: %w", err)
			}
			*dir = d
			if err := os.WriteFile(filepath.Join(d, "note.txt"), []byte(a.Text), 0o600); err != nil {
				return scratchOut{}, fmt.Errorf("scratch: cannot write: %w", err)
			}
			return scratchOut{Dir: d, Bytes: len(a.Text)}, nil
		})
	return []tool.Tool{whoami, scratch}
}

// lineSink writes each event as one JSON line as soon as it arrives.
type lineSink struct {
	mu  sync.Mutex
	f   *os.File
	enc *json.Encoder
}

func (s *lineSink) Export(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.enc.Encode(e)
}
func (s *lineSink) Flush(context.Context) error { s.mu.Lock(); defer s.mu.Unlock(); return s.f.Sync() }
func (s *lineSink) Close(context.Context) error { s.mu.Lock(); defer s.mu.Unlock(); return s.f.Close() }

func main() {
	events := flag.String("events", "", "append the door's events to this file, one JSON line each")
	flag.Parse()
	if err := run(*events); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}

func run(events string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opt := mcpserve.Options{Name: "agentry-testserver", Version: "1"}
	if events != "" {
		f, err := os.OpenFile(events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		// The bus numbers the events (meta.seq) and stamps their time.
		bus := event.NewBus(event.BusOptions{OnError: func(err error) { fmt.Fprintln(os.Stderr, "testserver:", err) }})
		if err := bus.Add(&lineSink{f: f, enc: json.NewEncoder(f)}, event.Filter{}); err != nil {
			return err
		}
		defer bus.Close(context.Background())
		opt.Sink = bus
	}
	s, err := mcpserve.New(tools(), opt)
	if err != nil {
		return err
	}
	serveErr := s.ServeStdio(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		return err
	}
	if serveErr != nil && ctx.Err() == nil {
		return serveErr
	}
	return nil
}
