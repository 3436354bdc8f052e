package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func init() { commands = append(commands, newDemoCmd) }

// demoOptions are the flags of `agentry demo`, and two seams for tests:
// where bubblewrap and python3 are looked for.
type demoOptions struct {
	sinks  sinkFlags
	bwrap  string // "" is the jail's default (bubblewrap on PATH)
	python string // "" is "python3" on the runner's PATH
}

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "A self-explaining tour: two users, live code sessions, and what closes them",
		Long: `A scripted tour on the offline defaults, with real code in real interpreters:
two users each get their own code session; a variable set in one call is read
in the next; a check-in pauses a turn and the session is still alive after the
resume; a conversation is closed, another idles out on an injected clock, and
a shutdown closes the rest. Every event goes to an events file (a new one in
a temporary directory unless --events says where), and the demo ends by
auditing that file: zero leaks, or it exits 1.

Code runs in a persistent Python interpreter, jailed with bubblewrap where it
can be; without bubblewrap it runs unjailed (the demo's own code only) and
says so; without python3 it runs sh in a process per call and says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.sinks.add(cmd)
	return cmd
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

// story prints the tool-session events as lines of the tour while they
// happen (the bus delivers synchronously), and keeps a count.
type story struct {
	mu     sync.Mutex
	w      io.Writer
	counts map[event.Type]int
}

func (s *story) Export(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[e.Type]++
	switch p := e.Payload.(type) {
	case *tool.SessionOpened:
		if e.Type == tool.TypeSessionReused {
			fmt.Fprintf(s.w, "       · session %s reused (call %d): the same %s\n", p.KeyHash, p.Calls, sessionNoun(p.RunnerID))
			return
		}
		fmt.Fprintf(s.w, "       · session %s opened for %s (scope %s, runner %s)\n", p.KeyHash, e.Meta.Principal, p.Scope, p.RunnerID)
	case *tool.SessionClosed:
		held := time.Duration(p.HeldMs * float64(time.Millisecond)).Round(time.Second)
		if e.Type == tool.TypeSessionCloseFailed {
			fmt.Fprintf(s.w, "   ✗ session %s FAILED to close (%s, %s): %s\n", p.KeyHash, p.Reason, p.ErrorClass, p.Error)
			return
		}
		fmt.Fprintf(s.w, "   ✓ session %s closed: %s, held %s\n", p.KeyHash, p.Reason, held)
	}
}
func (s *story) Flush(context.Context) error { return nil }
func (s *story) Close(context.Context) error { return nil }

func (s *story) count(t event.Type) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[t]
}

func sessionNoun(runnerID string) string {
	if strings.HasPrefix(runnerID, "local-interpreter") {
		return "interpreter"
	}
	return "working directory"
}

// narrated prints each call of a tool and what it returned, indented
// under the turn. The session lines print in between, as they happen.
type narrated struct {
	tool.Tool
	w io.Writer
}

func (n narrated) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	name := n.Spec().Name
	var in struct {
		Code string `json:"code"`
	}
	if name == "run_code" && json.Unmarshal(args, &in) == nil {
		fmt.Fprintf(n.w, "     %s ▸ %s\n", name, strings.ReplaceAll(in.Code, "\n", "\n"+strings.Repeat(" ", 5+len(name)+3)))
	} else {
		fmt.Fprintf(n.w, "     %s ▸ %s\n", name, args)
	}
	res, err := n.Tool.Call(ctx, c, args)
	switch {
	case err != nil:
		fmt.Fprintf(n.w, "       ◂ error: %v\n", err)
	default:
		fmt.Fprintf(n.w, "       ◂ %s\n", strings.ReplaceAll(strings.TrimSpace(res.Content), "\n", "\n         "))
	}
	return res, err
}

// tourStep is one tool call of the tour model. args reads the last tool
// result, so what the model sends follows what the code printed.
type tourStep struct {
	tool string
	args func(prev string) any
}

type tourScript struct {
	steps  []tourStep
	answer func(prev string) string
}

// tourModel plays the tour: for each person's message it has a script of
// tool calls and an answer built from the last tool result. It is
// deterministic and stateless (the step is the number of assistant
// messages since the person's message), so a resumed turn picks up where
// it paused. It is not a language model, and its name says so.
type tourModel struct {
	scripts map[string]tourScript
}

func (*tourModel) Name() string { return "agentry-demo tour (scripted; not a language model)" }

func (m *tourModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	user := -1
	for i, msg := range req.Messages {
		if msg.Role == llm.RoleUser {
			user = i
		}
	}
	if user < 0 {
		return llm.Response{}, errors.New("demo tour model: the request has no message from a person")
	}
	sc, ok := m.scripts[req.Messages[user].Content]
	if !ok {
		return llm.Response{}, fmt.Errorf("demo tour model: no script for %q", req.Messages[user].Content)
	}
	step := 0
	for _, msg := range req.Messages[user+1:] {
		if msg.Role == llm.RoleAssistant {
			step++
		}
	}
	prev := ""
	if last := req.Messages[len(req.Messages)-1]; last.Role == llm.RoleTool {
		prev = strings.TrimSpace(last.Content)
	}
	if step < len(sc.steps) {
		st := sc.steps[step]
		args, err := json.Marshal(st.args(prev))
		if err != nil {
			return llm.Response{}, err
		}
		return llm.Response{StopReason: llm.StopToolUse, Model: "demo-tour",
			ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("tour_%d", step), Name: st.tool, Args: args}}}, nil
	}
	return llm.Response{StopReason: llm.StopEnd, Model: "demo-tour", Text: sc.answer(prev)}, nil
}

// The people's messages, which the tour model answers by script.
const (
	msgAliceTotal  = "Load the prices and add them up."
	msgBobPeek     = "Is there a total in my session?"
	msgAliceReport = "Send the total to finance."
	msgCarolHello  = "Say hello."
)

// tourCode is the tour's code in one language: Python for the
// interpreter, sh for the process-per-call fallback (whose state between
// calls is files in the session's directory).
type tourCode struct {
	load, total, peek, double, hello string
	// state names what carries over between calls, kind what it is, and
	// noun what holds it.
	state, kind, noun string
}

var (
	pythonTour = tourCode{
		load:   "prices = [12, 30, 7]\ntotal = sum(prices)\nprint(f\"loaded {len(prices)} prices\")",
		total:  "print(total)",
		peek:   "print(\"total\" in globals())",
		double: "print(total * 2)",
		hello:  "import platform\nprint(f\"hello from Python {platform.python_version()}\")",
		state:  "total",
		kind:   "the variable",
		noun:   "interpreter",
	}
	shTour = tourCode{
		load:   "printf '%s\\n' 12 30 7 > prices.txt\necho \"loaded $(wc -l < prices.txt) prices\"",
		total:  "awk '{ s += $1 } END { print s }' prices.txt",
		peek:   "if [ -e prices.txt ]; then echo True; else echo False; fi",
		double: "awk '{ s += $1 } END { print s * 2 }' prices.txt",
		hello:  "echo \"hello from $(uname -s)\"",
		state:  "prices.txt",
		kind:   "the file",
		noun:   "working directory",
	}
)

func newTourModel(c tourCode) *tourModel {
	runCode := func(src string) tourStep {
		return tourStep{tool: "run_code", args: func(string) any { return map[string]string{"code": src} }}
	}
	return &tourModel{scripts: map[string]tourScript{
		msgAliceTotal: {
			steps:  []tourStep{runCode(c.load), runCode(c.total)},
			answer: func(prev string) string { return "The total is " + prev + "." },
		},
		msgBobPeek: {
			steps:  []tourStep{runCode(c.peek)},
			answer: func(prev string) string { return "Asked whether a total exists, your session says " + prev + "." },
		},
		msgAliceReport: {
			steps: []tourStep{
				runCode(c.total),
				{tool: "send_report", args: func(prev string) any {
					return map[string]string{"to": "finance", "text": "the total is " + prev}
				}},
				runCode(c.double),
			},
			answer: func(prev string) string { return "Sent. For the record, twice the total is " + prev + "." },
		},
		msgCarolHello: {
			steps:  []tourStep{runCode(c.hello)},
			answer: func(prev string) string { return prev },
		},
	}}
}

type reportArgs struct {
	To   string `json:"to" jsonschema:"who receives the report"`
	Text string `json:"text" jsonschema:"what it says"`
}

// sendReport stands for any tool with consequences: it needs a person's
// approval before every call.
func sendReport() tool.Tool {
	return tool.WithCheckIn(tool.Func("send_report", "Send a short report to a team (needs a person's approval).",
		func(_ context.Context, _ *tool.Call, in reportArgs) (string, error) {
			return fmt.Sprintf("sent to %s: %q", in.To, in.Text), nil
		}))
}

// demoRunner picks where the tour's code runs and says why, in lines
// for the story: the persistent Python interpreter, jailed when bubblewrap
// can jail; without python3, sh in a process per call. It never fails for
// a missing jail or interpreter: the tour runs only its own code.
func demoRunner(ctx context.Context, o demoOptions) (r code.Runner, lang string, tour tourCode, about []string, err error) {
	jail := &local.Jail{Bwrap: o.bwrap}
	where := []string{"jailed with bubblewrap"}
	if jerr := local.CheckJail(ctx, *jail); jerr != nil {
		jail = nil
		where = []string{
			"UNJAILED: bubblewrap cannot build a jail here (" + firstClause(jerr) + ")",
			"fine for the demo's own code; install bubblewrap (apt-get install bubblewrap) before running a model's code",
		}
	}
	opt := local.Options{Jail: jail}
	if o.python != "" {
		opt.Commands = map[string]string{"python": o.python}
	}
	interp := local.NewInterpreter(opt)
	probe, perr := interp.Start(ctx, code.StartRequest{Key: "demo-probe", Language: "python"})
	if perr == nil {
		_ = probe.Stop(context.WithoutCancel(ctx))
		return interp, "python", pythonTour,
			append([]string{"run_code: one persistent Python interpreter per conversation (scope session)"}, where...), nil
	}
	if !errors.Is(perr, local.ErrInterpreterMissing) {
		return nil, "", tourCode{}, nil, fmt.Errorf("starting the demo's Python interpreter: %w", perr)
	}
	opt.Commands = nil
	return local.New(opt), "sh", shTour, append([]string{
		"run_code: sh, a process per call, with one working directory per conversation (scope session)",
		"python3 is missing, so the tour runs sh instead (apt-get install python3 for the persistent interpreter)",
	}, where...), nil
}

// firstClause shortens an error to its first clause for the story.
func firstClause(err error) string {
	s := oneLine(err.Error())
	if i := strings.IndexAny(s, ";"); i > 0 {
		s = s[:i]
	}
	return s
}

func runDemo(ctx context.Context, o demoOptions, w, stderr io.Writer) error {
	if o.sinks.events == "" {
		dir, err := os.MkdirTemp("", "agentry-demo-")
		if err != nil {
			return failure(err)
		}
		o.sinks.events = filepath.Join(dir, "events.ndjson")
	}
	sinks, closeSinks, err := o.sinks.open(ctx, stderr)
	if err != nil {
		return failure(err)
	}
	// Sessions live in the runner's default directory, which a jail's
	// unprivileged user can traverse; each is removed when it closes.
	runner, lang, tour, about, err := demoRunner(ctx, o)
	if err != nil {
		_ = closeSinks(context.WithoutCancel(ctx))
		return failure(err)
	}

	clock := &demoClock{now: time.Now().UTC().Truncate(time.Second)}
	st := &story{w: w, counts: map[event.Type]int{}}
	runCode := code.NewTool(runner, code.ToolOptions{Scope: toolsession.ScopeSession, Language: lang})
	a, err := agent.New(agent.Options{
		ID:          "agentry-demo",
		Model:       newTourModel(tour),
		Tools:       []tool.Tool{narrated{runCode, w}, narrated{sendReport(), w}},
		Sinks:       append([]event.Sink{st}, sinks...),
		Now:         clock.Now,
		SessionIdle: 15 * time.Minute,
	})
	if err != nil {
		_ = closeSinks(context.WithoutCancel(ctx))
		return failure(err)
	}
	tourErr := tell(ctx, a, tour, clock, w, about, o.sinks.events)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runShutdownBound)
	shutErr := a.Shutdown(sctx) // closes whatever is left, flushes and closes the events file
	cancel()
	if tourErr != nil || shutErr != nil {
		return failure(errors.Join(tourErr, shutErr))
	}
	fmt.Fprintf(w, "   (%d sessions opened, %d closed, %d failed to close; %d still live)\n",
		st.count(tool.TypeSessionStarted), st.count(tool.TypeSessionClosed), st.count(tool.TypeSessionCloseFailed), a.LiveToolSessions())

	fmt.Fprintf(w, "\n6. The audit of the events file (agentry events audit %s)\n", o.sinks.events)
	r := audit.Audit([]string{o.sinks.events})
	printDemoAudit(w, r)
	if r.Problems() {
		return failure(errProblems)
	}
	return nil
}

// tell runs the tour, printing it.
func tell(ctx context.Context, a *agent.Agent, tour tourCode, clock *demoClock, w io.Writer, about []string, eventsPath string) error {
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	bob := &tool.Identity{Tenant: "acme", Principal: "bob"}
	carol := &tool.Identity{Tenant: "acme", Principal: "carol"}

	fmt.Fprintln(w, "agentry demo: two people, live code sessions, and what closes them — offline")
	fmt.Fprintln(w, "  model:  a scripted tour (deterministic; not a language model)")
	fmt.Fprintln(w, "  code:  ", strings.Join(about, "\n          "))
	fmt.Fprintln(w, "  events:", eventsPath)
	fmt.Fprintln(w, "  Isolation keys appear only as their 12-hex-digit hash.")

	turn := func(who *tool.Identity, session, msg string, conv *agent.Conversation) (agent.Result, error) {
		clock.Advance(5 * time.Second) // a person types between turns
		fmt.Fprintf(w, "   %s (tenant %s), conversation %s: %q\n", who.Principal, who.Tenant, session, msg)
		res, err := a.Run(ctx, agent.Input{Message: msg, SessionID: session, Identity: who, Conversation: conv})
		if err != nil {
			return res, fmt.Errorf("demo: %s's turn: %w", who.Principal, err)
		}
		if res.Paused == nil {
			fmt.Fprintf(w, "     answer: %q\n", res.Output)
		}
		return res, nil
	}

	fmt.Fprintln(w, "\n1. Two users, one code session each")
	aliceRes, err := turn(alice, "conv-alice", msgAliceTotal, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "     (%s %s was set in the first call and read in the second: the session holds state)\n", tour.kind, tour.state)
	if _, err := turn(bob, "conv-bob", msgBobPeek, nil); err != nil {
		return err
	}
	fmt.Fprintf(w, "     (bob's session is his own: tenant and principal are part of its key, so alice's %s is not there)\n", tour.state)

	fmt.Fprintln(w, "\n2. A check-in pauses the turn; the session stays alive")
	res, err := turn(alice, "conv-alice", msgAliceReport, aliceRes.Conversation)
	if err != nil {
		return err
	}
	if res.Paused == nil {
		return errors.New("demo: the check-in did not pause the turn")
	}
	pausedRun := res.RunID
	fmt.Fprintf(w, "     ⏸ paused, run %s: %s\n", pausedRun, strings.ReplaceAll(res.Paused.Question, "\n", "\n       "))
	fmt.Fprintf(w, "       %d tool sessions are live; alice's %s stays while she decides\n", a.LiveToolSessions(), tour.noun)
	clock.Advance(30 * time.Second)
	fmt.Fprintln(w, "     alice approves; the same run resumes")
	res, err = a.Resume(ctx, res.Paused.Checkpoint, agent.Decision{Approve: true, Note: "alice approved"})
	if err != nil {
		return fmt.Errorf("demo: resuming alice's turn: %w", err)
	}
	if res.RunID != pausedRun || res.Paused != nil {
		return fmt.Errorf("demo: the resume ran as %s (paused %v), want run %s to finish", res.RunID, res.Paused != nil, pausedRun)
	}
	fmt.Fprintf(w, "     answer: %q\n", res.Output)
	fmt.Fprintf(w, "     (the same %s after the resume: %s %s was still there)\n", tour.noun, tour.kind, tour.state)

	fmt.Fprintln(w, "\n3. alice closes her conversation: CloseToolSessions(\"conv-alice\")")
	clock.Advance(10 * time.Second)
	n := a.CloseToolSessions(ctx, "conv-alice")
	fmt.Fprintf(w, "   (closed %d session; bob's is untouched: %d live)\n", n, a.LiveToolSessions())

	fmt.Fprintln(w, "\n4. bob goes quiet: idle expiry after 15 minutes, on an injected clock (nothing sleeps)")
	clock.Advance(16 * time.Minute)
	fmt.Fprintln(w, "   16 minutes pass; the host's sweep runs")
	a.SweepIdleToolSessions()
	if err := a.SettleToolSessions(ctx); err != nil {
		return err
	}

	fmt.Fprintln(w, "\n5. Shutdown closes whatever is still open")
	if _, err := turn(carol, "conv-carol", msgCarolHello, nil); err != nil {
		return err
	}
	clock.Advance(2 * time.Minute)
	fmt.Fprintln(w, "   two minutes later the process stops while carol's conversation is open: Shutdown")
	return nil
}

func printDemoAudit(w io.Writer, r *audit.Report) {
	bad := 0
	for _, f := range r.Files {
		bad += f.Bad
	}
	fmt.Fprintf(w, "   %d events read, %d bad lines\n", r.Events, bad)
	for _, ts := range r.Tools {
		var closed []string
		for reason, n := range ts.Closed {
			closed = append(closed, fmt.Sprintf("%s %d", reason, n))
		}
		sort.Strings(closed)
		fmt.Fprintf(w, "   %s (scope %s): %d opened, %d reused, closed by %s; %d failed to close, %d still open\n",
			safe(ts.Tool), safe(ts.Scope), ts.Opened, ts.Reused, strings.Join(closed, ", "), len(ts.Failed), ts.Open)
	}
	if r.Problems() {
		fmt.Fprintf(w, "   verdict: PROBLEMS — %d still open, %d failed closes, %d runs ended with sessions open (agentry events audit prints them)\n",
			len(r.Open), len(r.FailedCloses), len(r.EndedRuns))
		return
	}
	fmt.Fprintln(w, "   verdict: zero leaks — every session closed, none failed to close, no run ended with one open")
}
