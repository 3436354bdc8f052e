package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/provider"
)

// runACPTurn is `agentry run --agent acp`: one session of the agent in
// the workspace (a fresh directory, printed, when --workspace is not
// given), one turn, its permission requests asked on the terminal
// (--approve approves them), its answer printed.
func runACPTurn(ctx context.Context, o runOptions, message string, stdin io.Reader, stdout, stderr io.Writer) error {
	ws, err := runWorkspace(o.workspace, stderr)
	if err != nil {
		return err
	}
	cfg, err := o.acp.config(ws, false)
	if err != nil {
		return err
	}
	bus, err := runACPBus(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = bus.Close(cctx) // closes the sinks
	}()
	export := bus.Export
	l, _, closeLauncher, err := acpLauncher(ctx, "run", o.caps, o.allowUnjailed, export, stderr)
	if err != nil {
		return err
	}
	defer closeLauncher()
	reg, inst, err := openACP(ctx, l, "acp", cfg, export, provider.WithEvents(export))
	if err != nil {
		return failure(err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runShutdownBound)
		defer cancel()
		if err := reg.Dispose(dctx); err != nil {
			fmt.Fprintf(stderr, "agentry: warning: stopping the agent: %s\n", oneLine(err.Error()))
		}
	}()
	sessionID := o.session
	if sessionID == "" {
		sessionID = "run-" + fmt.Sprint(time.Now().UnixNano())
	}
	s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: sessionID, WorkingDirectory: ws,
		Interactions: &termInteractions{stdin: stdin, stderr: stderr}})
	if err != nil {
		return failure(fmt.Errorf("starting the agent: %s", oneLine(err.Error())))
	}
	vs := s
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runShutdownBound)
		defer cancel()
		_ = vs.Close(cctx, provider.CloseRequested)
	}()

	turnID := "t1"
	var answer strings.Builder
	outs := vs.RunTurn(ctx, provider.TurnRequest{TurnID: turnID, Input: message})
	for {
		var pending *provider.Request
		var outcome provider.Outcome
		for out, err := range outs {
			if err != nil {
				if ctx.Err() != nil {
					return failure(fmt.Errorf("interrupted (%v); the agent was stopped", context.Cause(ctx)))
				}
				return failure(fmt.Errorf("the turn failed: %s", oneLine(err.Error())))
			}
			switch out.Kind {
			case provider.OutputText:
				answer.WriteString(out.Text)
			case provider.OutputActivity:
				fmt.Fprintf(stderr, "agentry: %s\n", oneLine(out.Text))
			case provider.OutputRequest:
				pending = out.Request
			case provider.OutputTurnCompleted:
				outcome = out.Outcome
			}
		}
		if pending == nil {
			if outcome != "" && outcome != provider.OutcomeCompleted {
				fmt.Fprintln(stdout, answer.String())
				return failure(fmt.Errorf("the turn ended %s", outcome))
			}
			break
		}
		d, err := decide(ctx, o, &agent.Pause{Question: pending.Prompt, ToolName: pending.Tool}, stdin, stderr)
		if err != nil {
			return failure(err)
		}
		outs = vs.Resolve(ctx, provider.Resolution{TurnID: turnID, RequestID: pending.ID, Approve: d.Approve, Note: d.Note})
	}
	fmt.Fprintln(stdout, answer.String())
	return nil
}

// runACPBus is the bus of agentry run --agent acp: the --events sinks,
// and the person at the terminal told of each connection the jail
// refuses the agent, as it happens, with the flag that would allow it.
func runACPBus(ctx context.Context, o runOptions, stderr io.Writer) (*event.Bus, error) {
	sinks, _, err := o.sinks.open(ctx, stderr)
	if err != nil {
		return nil, failure(err)
	}
	bus := event.NewBus(event.BusOptions{OnError: func(err error) { fmt.Fprintf(stderr, "agentry: events: %v\n", err) }})
	for _, sk := range sinks {
		_ = bus.Add(sk, event.Filter{})
	}
	_ = bus.Add(newRefusedNotices(stderr), event.Filter{Types: []event.Type{jail.TypeRefused}})
	return bus, nil
}

// runWorkspace is --workspace, absolute, or a fresh directory (printed,
// kept) when it is not given.
func runWorkspace(dir string, stderr io.Writer) (string, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "agentry-workspace-")
		if err != nil {
			return "", failure(fmt.Errorf("making a workspace: %w; pass --workspace DIR", err))
		}
		fmt.Fprintf(stderr, "agentry: workspace %s (kept)\n", d)
		return d, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usageError("--workspace: %v", err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", usageError("--workspace %s is not a directory", dir)
	}
	return abs, nil
}

// termInteractions asks the person at the terminal what the agent asks
// outside a turn's requests (ACP elicitation): a notice is printed; a
// question is answered on a line (one of its options, when it offers
// some). With no terminal it is declined, and stderr says so (--approve
// answers approvals only, never a question).
type termInteractions struct {
	stdin  io.Reader
	stderr io.Writer
	mu     sync.Mutex // one question at a time at the terminal
}

func (ti *termInteractions) Interact(ctx context.Context, _ string, in provider.Interaction) (provider.InteractionReply, error) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	fmt.Fprintf(ti.stderr, "agentry: the agent asks: %s\n", oneLine(in.Message))
	if in.Kind == provider.InteractionNotice {
		return provider.InteractionReply{}, nil
	}
	if !terminalIn(ti.stdin) {
		fmt.Fprintln(ti.stderr, "agentry: declined: stdin is not a terminal, so nobody can answer")
		return provider.InteractionReply{Declined: true}, nil
	}
	if len(in.Options) > 0 {
		fmt.Fprintf(ti.stderr, "choose one of: %s (empty declines)\n", strings.Join(in.Options, ", "))
	}
	fmt.Fprint(ti.stderr, "> ")
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(ti.stdin).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		s = strings.TrimSpace(s)
		if s == "" || (len(in.Options) > 0 && !slices.Contains(in.Options, s)) {
			fmt.Fprintln(ti.stderr, "agentry: declined")
			return provider.InteractionReply{Declined: true}, nil
		}
		return provider.InteractionReply{Answer: s}, nil
	case <-ctx.Done():
		fmt.Fprintln(ti.stderr)
		return provider.InteractionReply{}, context.Cause(ctx)
	}
}

// refusedNotices is the sink that tells the person at the terminal about
// each connection the jail refused the agent: one line naming the target
// and the flag that would allow it. It never blocks the event's sender:
// lines wait in a bounded queue for the writer (past it they are counted,
// and the count is told).
type refusedNotices struct {
	w     io.Writer
	lines chan string
	done  chan struct{}

	mu      sync.Mutex
	closed  bool
	dropped int
}

func newRefusedNotices(w io.Writer) *refusedNotices {
	n := &refusedNotices{w: w, lines: make(chan string, 64), done: make(chan struct{})}
	go n.write()
	return n
}

func (n *refusedNotices) write() {
	defer close(n.done)
	for l := range n.lines {
		fmt.Fprintln(n.w, l)
	}
}

// Export queues the line for a refused connection.
func (n *refusedNotices) Export(e event.Event) {
	p, ok := e.Payload.(*jail.Refused)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	select {
	case n.lines <- refusedLine(p):
	default:
		n.dropped++
	}
}

// refusedLine is what the person is told about one refusal.
func refusedLine(p *jail.Refused) string {
	if p.Target == "" {
		return fmt.Sprintf("agentry: %d more connections of the agent were refused and not reported one by one", p.Suppressed)
	}
	target := p.Target
	if strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\'' || r == '"' }) {
		target = strconv.Quote(target) // what an agent asked for, shown as it is
	}
	l := "agentry: the jail refused the agent's connection to " + target + ": it is not on the allowlist; to allow it, pass --agent-allow-host " + target
	if p.Suppressed > 0 {
		l += fmt.Sprintf(" (%d more were refused before it and not reported)", p.Suppressed)
	}
	return l
}

// Flush does nothing: lines are written as they come.
func (n *refusedNotices) Flush(context.Context) error { return nil }

// Close writes what is queued, and the count of lines dropped.
func (n *refusedNotices) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.lines)
	dropped := n.dropped
	n.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if dropped > 0 {
		fmt.Fprintf(n.w, "agentry: %d more refused connections of the agent were not shown\n", dropped)
	}
	return nil
}
