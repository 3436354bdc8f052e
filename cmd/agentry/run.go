package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
)

func init() { commands = append(commands, newRunCmd) }

// runOptions are the flags of `agentry run`.
type runOptions struct {
	model, runner              string
	caps                       sessionCaps
	session, tenant, principal string
	approve, ask, asJSON       bool
	sinks                      sinkFlags
	agent                      string
	acp                        acpFlags
	workspace                  string
	allowUnjailed              bool
}

// runSystem is the system prompt a language model gets from `agentry run`.
// The scripted calculator ignores it.
const runSystem = "You can run code with the run_code tool. When a question needs computing or data, " +
	"write a short program, run it, and answer from what it printed."

// runShutdownBound bounds the agent's shutdown after the turn: the
// in-flight drain is over by then, so it is the four teardown-bounded steps
// (cancelled runs, flush, tool sessions, close) with room to spare.
const runShutdownBound = 30 * time.Second

// terminalIn reports whether r is a terminal a person can answer on. Tests
// replace it.
var terminalIn = func(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] MESSAGE",
		Short: "Run one turn of an agent that computes with run_code",
		Long: `Run one turn: send MESSAGE to the model, run the tool calls it asks for, and
print its answer. The agent has one tool, run_code, whose session (a
persistent Python interpreter by default) lives for this turn.

Offline by default: the model is the scripted calculator, which runs the code
in your message and answers with what it printed. MESSAGE "-" reads the
message from stdin.

Check-ins: with --ask, every run_code call waits for a person's approval.
--approve approves them all; otherwise you are asked on the terminal (y/N).
When stdin is not a terminal and --approve is absent, the call is declined
and a note says so.

Exit status: 0 when the model answered, 1 when the run failed (the reason is
one line on stderr), 2 for a usage error. SIGINT or SIGTERM stops the turn,
closes every tool session and exits 1.

` + modelHelp,
		Example: `  agentry run 'print(6*7)'
  agentry run --json '2**100'
  agentry run --events events.ndjson --tenant acme --principal alice 'import sys; print(sys.version)'
  agentry run --model anthropic:claude-sonnet-4-5 'What is the 20th Fibonacci number?'
  OPENAI_BASE_URL=http://localhost:8000/v1 agentry run --model openai:qwen2.5 'Sum the primes below 1000'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("run takes exactly one MESSAGE (%d given); quote it: agentry run 'print(6*7)'", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkAgentFlags(cmd.Flags(), o.agent, "workspace", "allow-unjailed"); err != nil {
				return err
			}
			if o.agent == "acp" {
				for _, name := range []string{"model", "runner", "ask", "json", "tenant", "principal"} {
					if cmd.Flags().Changed(name) {
						return usageError("--%s is for --agent native; the ACP agent brings its own model and tools", name)
					}
				}
				if strings.TrimSpace(args[0]) == "" {
					return usageError("the MESSAGE is empty; say what the agent should do")
				}
				_ = checkInlineEnv(o.acp.env, false, cmd.ErrOrStderr())
				return runACPTurn(cmd.Context(), o, args[0], cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runTurn(cmd.Context(), o, args[0], cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", defaultModel, "the model: scripted, anthropic:MODEL, openai:MODEL or ollama:MODEL (below)")
	f.StringVar(&o.runner, "runner", "", "where model-written code runs: "+runnerKinds+" (default: the interpreter, jailed when bubblewrap can)")
	o.caps.add(f)
	f.StringVar(&o.session, "session", "", "bind the run to this conversation id (it reaches tools and events)")
	f.StringVar(&o.tenant, "tenant", "", "the tenant the run acts for (identity is sent only when given)")
	f.StringVar(&o.principal, "principal", "", "the principal the run acts for (identity is sent only when given)")
	f.BoolVar(&o.ask, "ask", false, "ask a person before every run_code call (a check-in)")
	f.BoolVar(&o.approve, "approve", false, "approve every check-in without asking")
	f.BoolVar(&o.asJSON, "json", false, "print the result and the conversation as JSON")
	f.StringVar(&o.agent, "agent", "native", "the agent: native (agentry's own, with --model and --runner) or acp (a coding agent over the Agent Client Protocol, jailed, with --agent-cmd)")
	o.acp.add(f)
	f.StringVar(&o.workspace, "workspace", "", "with --agent acp: the agent's workspace, its one writable directory (default: a fresh directory, printed)")
	f.BoolVar(&o.allowUnjailed, "allow-unjailed", false, "with --agent acp: run the agent UNJAILED when it cannot be jailed (no bubblewrap, not root): as this user, with its files and network; for one person on their own machine")
	o.sinks.add(cmd)
	return cmd
}

// runResult is what --json prints.
type runResult struct {
	RunID        string              `json:"runId,omitempty"`
	Output       string              `json:"output"`
	CheckIns     []checkIn           `json:"checkIns,omitempty"`
	Conversation *agent.Conversation `json:"conversation,omitempty"`
	Error        string              `json:"error,omitempty"`
}

// checkIn is one question a tool asked and what was decided.
type checkIn struct {
	Tool     string `json:"tool"`
	Question string `json:"question"`
	Approved bool   `json:"approved"`
	Note     string `json:"note,omitempty"`
}

// checkFlagValue accepts what --session, --tenant and --principal may hold:
// 1–128 printable characters without spaces.
func checkFlagValue(flag, v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 128 || strings.ContainsFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return usageError("--%s must be 1 to 128 printable characters without spaces", flag)
	}
	return nil
}

func runTurn(ctx context.Context, o runOptions, message string, stdin io.Reader, stdout, stderr io.Writer) error {
	for _, fv := range [][2]string{{"session", o.session}, {"tenant", o.tenant}, {"principal", o.principal}} {
		if err := checkFlagValue(fv[0], fv[1]); err != nil {
			return err
		}
	}
	if message == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, 1<<20+1))
		if err != nil {
			return failure(fmt.Errorf("reading the message from stdin: %w", err))
		}
		if len(b) > 1<<20 {
			return usageError("the message on stdin is over 1 MiB; stage large data as a file instead")
		}
		message, stdin = string(b), strings.NewReader("")
	}
	if strings.TrimSpace(message) == "" {
		return usageError("the MESSAGE is empty; say what to compute, e.g. agentry run 'print(6*7)'")
	}
	model, err := parseModel(o.model, os.Getenv)
	if err != nil {
		return err
	}
	system := runSystem
	if model == nil {
		model, system = scripted.Calculator(), ""
	}
	// Identity is what the caller says, and only when they say it.
	var id *tool.Identity
	if o.tenant != "" || o.principal != "" {
		id = &tool.Identity{Tenant: o.tenant, Principal: o.principal}
	}
	runner, err := runRunner(ctx, o, stderr)
	if err != nil {
		return err
	}
	stateLimits(runner, false, stderr)
	var runCode tool.Tool = code.NewTool(runner, code.ToolOptions{})
	if o.ask {
		runCode = tool.WithCheckIn(runCode)
	}
	sinks, closeSinks, err := o.sinks.open(ctx, stderr)
	if err != nil {
		return failure(err)
	}
	a, err := agent.New(agent.Options{ID: "agentry-run", Model: model, System: system, Tools: []tool.Tool{runCode}, Sinks: sinks})
	if err != nil {
		_ = closeSinks(context.WithoutCancel(ctx))
		return failure(err)
	}

	// The turn runs on a context signals do not cancel: a signal stops it
	// through the agent's Shutdown, which cancels the run, closes every
	// tool session and flushes the events.
	turnCtx := context.WithoutCancel(ctx)
	stopWatch := context.AfterFunc(ctx, func() {
		fmt.Fprintf(stderr, "agentry: %v: stopping the turn and closing its tool sessions\n", context.Cause(ctx))
		now, cancel := context.WithCancel(turnCtx)
		cancel() // no drain: cancel the turn at once; the later steps keep their own bounds
		_ = a.Shutdown(now)
	})

	out := runResult{}
	res, err := a.Run(turnCtx, agent.Input{Message: message, SessionID: o.session, Identity: id})
	for err == nil && res.Paused != nil {
		p := res.Paused
		d, derr := decide(ctx, o, p, stdin, stderr)
		if derr != nil {
			err = derr
			break
		}
		out.CheckIns = append(out.CheckIns, checkIn{Tool: p.ToolName, Question: p.Question, Approved: d.Approve, Note: d.Note})
		res, err = a.Resume(turnCtx, p.Checkpoint, d)
	}
	stopWatch()
	sctx, cancel := context.WithTimeout(turnCtx, runShutdownBound)
	shutErr := a.Shutdown(sctx)
	cancel()

	// A turn that answered before the signal keeps its answer.
	interrupted := err != nil && ctx.Err() != nil
	switch {
	case interrupted:
		err = fmt.Errorf("interrupted (%v); the turn was stopped and its tool sessions closed", context.Cause(ctx))
		if shutErr != nil && !strings.Contains(shutErr.Error(), "in flight") {
			err = fmt.Errorf("%w; shutting down: %v", err, shutErr)
		}
	case shutErr != nil:
		// The answer stands; what failed after it is not silent.
		fmt.Fprintf(stderr, "agentry: warning: %s\n", oneLine(shutErr.Error()))
	}
	out.RunID = res.RunID
	if err == nil {
		out.Output, out.Conversation = res.Output, res.Conversation
	} else {
		out.Error = oneLine(err.Error())
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(out); jerr != nil && err == nil {
			err = jerr
		}
	} else if err == nil {
		fmt.Fprintln(stdout, res.Output)
	}
	switch {
	case err == nil:
		return nil
	case interrupted:
		return failure(err)
	}
	return failure(fmt.Errorf("the run failed: %s", oneLine(err.Error())))
}

// decide answers a check-in: --approve approves; a terminal asks the
// person; anything else declines with a note saying why.
func decide(ctx context.Context, o runOptions, p *agent.Pause, stdin io.Reader, stderr io.Writer) (agent.Decision, error) {
	fmt.Fprintf(stderr, "agentry: check-in: %s\n", oneLine(p.Question))
	if o.approve {
		fmt.Fprintln(stderr, "agentry: approved (--approve)")
		return agent.Decision{Approve: true, Note: "approved with --approve"}, nil
	}
	if !terminalIn(stdin) {
		fmt.Fprintln(stderr, "agentry: declined: stdin is not a terminal, so nobody can be asked; pass --approve to approve check-ins")
		return agent.Decision{Approve: false, Note: "declined: nobody was at a terminal to approve, and --approve was not given"}, nil
	}
	fmt.Fprint(stderr, "Approve? [y/N] ")
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdin).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "y", "yes":
			return agent.Decision{Approve: true, Note: "approved at the terminal"}, nil
		}
		return agent.Decision{Approve: false, Note: "declined at the terminal"}, nil
	case <-ctx.Done():
		fmt.Fprintln(stderr)
		return agent.Decision{}, context.Cause(ctx)
	}
}

// oneLine folds a message onto one line for stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// runRunner is run's runner (--runner, jailed with the session caps), once
// it is known to find Python.
func runRunner(ctx context.Context, o runOptions, stderr io.Writer) (code.Runner, error) {
	jail, err := o.caps.jail()
	if err != nil {
		return nil, err
	}
	runner, err := newRunner(ctx, o.runner, local.Options{Jail: jail}, stderr)
	if err != nil {
		return nil, err
	}
	if err := needInterpreter(runner); err != nil {
		return nil, err
	}
	return runner, nil
}

// needInterpreter refuses a run whose run_code could not start Python,
// before the model is asked anything: the person at the terminal is told
// what to install and the run exits 1, rather than the model answering
// with the tool's failure and the run exiting 0.
func needInterpreter(r code.Runner) error {
	l, ok := r.(interface {
		LookInterpreter(language string) (string, error)
	})
	if !ok {
		return nil // a remote runner brings its own interpreter
	}
	_, err := l.LookInterpreter("python")
	switch {
	case err == nil:
		return nil
	case errors.Is(err, local.ErrInterpreterMissing):
		return failure(errors.New("run_code runs Python, and python3 is not on PATH; install it (Debian/Ubuntu: sudo apt-get install python3; macOS: brew install python3) or put the directory holding python3 on PATH, then run again"))
	}
	return failure(fmt.Errorf("run_code cannot run Python: %w", err))
}
