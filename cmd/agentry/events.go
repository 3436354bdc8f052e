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
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/event/otel"
)

func init() {
	commands = append(commands, newEventsCmd)
}

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Read agentry event files (NDJSON): tail, audit, stats",
		Long: `Read the NDJSON files the event sink writes (--events FILE on the commands
that run agents). Each reads FILE.1, the one older generation, where that
matters.`,
	}
	cmd.AddCommand(newEventsTailCmd(), newEventsAuditCmd(), newEventsStatsCmd())
	return cmd
}

// sinkFlags are the flags a command that runs agents offers for its
// events: --events FILE (NDJSON), --events-max-bytes, and --otel
// (OpenTelemetry over OTLP/HTTP, configured by OTEL_EXPORTER_OTLP_*).
// Add them with add, then open the sinks with open and close them with
// the function it returns.
type sinkFlags struct {
	events    string
	eventsMax int64
	otel      bool
}

func (f *sinkFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.events, "events", "", "append every event as one JSON line to this file (read it with 'agentry events')")
	cmd.Flags().Int64Var(&f.eventsMax, "events-max-bytes", 0, "rotate the events file to FILE.1 past this size (0: never; leave rotation to logrotate)")
	cmd.Flags().BoolVar(&f.otel, "otel", false, "export spans and metrics over OTLP/HTTP, configured by the OTEL_EXPORTER_OTLP_* variables")
}

// open opens the sinks the flags ask for. Failures to write are reported
// on stderr. closeAll flushes and closes them, bounded by its ctx.
func (f *sinkFlags) open(ctx context.Context, stderr io.Writer) (sinks []event.Sink, closeAll func(context.Context) error, err error) {
	closeAll = func(ctx context.Context) error {
		var errs []error
		for _, s := range sinks {
			errs = append(errs, s.Close(ctx))
		}
		return errors.Join(errs...)
	}
	report := func(err error) { fmt.Fprintln(stderr, "agentry: events:", err) }
	if f.events != "" {
		s, err := ndjson.Open(f.events, ndjson.Options{MaxBytes: f.eventsMax, OnError: report})
		if err != nil {
			return nil, nil, err
		}
		sinks = append(sinks, s)
	}
	if f.otel {
		s, err := otel.NewFromEnv(ctx, otel.Options{OnError: report})
		if err != nil {
			_ = closeAll(ctx)
			return nil, nil, err
		}
		sinks = append(sinks, s)
	}
	return sinks, closeAll, nil
}

func newEventsTailCmd() *cobra.Command {
	var (
		last      int
		fromStart bool
		colorMode string
		poll      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail FILE",
		Short: "Follow an event file, one readable line per event",
		Long: `Print the last events of FILE, then follow it as it grows, across the sink's
rotation to FILE.1 and logrotate's copytruncate. Colour is used only when
the output is a terminal (and NO_COLOR is not set), unless --color says
otherwise. Stops on interrupt.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			color, err := useColor(colorMode, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if fromStart {
				last = -1
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = ndjson.Follow(cmd.Context(), args[0], ndjson.FollowOptions{
				Last: last,
				Poll: poll,
				OnBad: func(b ndjson.BadLine) {
					fmt.Fprintf(errw, "agentry: %s line %d is not an event: %s\n", args[0], b.Line, b.Reason)
				},
			}, func(e event.Event) { fmt.Fprintln(out, audit.Format(e, color)) })
			if err != nil {
				return failure(err)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&last, "lines", "n", 10, "how many of the events already in the file to print first")
	cmd.Flags().BoolVar(&fromStart, "from-start", false, "print the whole file first")
	cmd.Flags().StringVar(&colorMode, "color", "auto", "auto, always or never")
	cmd.Flags().DurationVar(&poll, "poll", 250*time.Millisecond, "how often to look for new events")
	return cmd
}

func useColor(mode string, w io.Writer) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto", "":
		if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
			return false, nil
		}
		f, ok := w.(*os.File)
		return ok && term.IsTerminal(int(f.Fd())), nil
	}
	return false, usageError("--color %q: use auto, always or never", mode)
}

// errProblems makes `events audit` exit 1 after printing its report.
var errProblems = errors.New("the audit found a leak or a failed close")

func newEventsAuditCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit FILE...",
		Short: "Report tool sessions left open, failed closes, and runs that ended with sessions open",
		Long: `Read the event files (each with its FILE.1 generation, oldest first) and
report, per tool and scope, the sessions opened, reused, closed by reason
and failed to close; then every session still open at the end of the files
(keyHash, tool, scope, opening run), every failed close, and every run that
ended (answer, error or cancelled — a pause is not an end) while its
run-scoped sessions stayed open.

Exits 1 when it finds any of those, or a named file is missing, so it can
gate a deploy. --json prints the report for machines.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := audit.Audit(args)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return failure(err)
				}
			} else {
				printAudit(cmd.OutOrStdout(), r)
			}
			for _, f := range r.Files {
				if f.Missing {
					return failure(fmt.Errorf("%s does not exist", f.Path))
				}
				if f.Err != "" {
					return failure(fmt.Errorf("reading %s: %s", f.Path, f.Err))
				}
			}
			if r.Problems() {
				return failure(errProblems)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printAudit(w io.Writer, r *audit.Report) {
	printFiles(w, r.Files, r.Events)
	fmt.Fprintln(w)
	if len(r.Tools) == 0 {
		fmt.Fprintln(w, "no tool sessions")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tSCOPE\tOPENED\tREUSED\tCLOSED\tFAILED\tSTILL OPEN")
		for _, ts := range r.Tools {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\n", safe(ts.Tool), safe(ts.Scope), ts.Opened, ts.Reused, reasons(ts.Closed), reasons(ts.Failed), ts.Open)
		}
		tw.Flush()
	}
	if r.UnmatchedCloses > 0 {
		fmt.Fprintf(w, "(%d closes of sessions opened before these files begin)\n", r.UnmatchedCloses)
	}
	if len(r.Open) > 0 {
		fmt.Fprintf(w, "\nSESSIONS STILL OPEN AT THE END (%d)\n", len(r.Open))
		for _, s := range r.Open {
			state := "run still going"
			switch {
			case s.RunID == "":
				state = "no run"
			case s.RunState == event.OutcomePaused:
				state = "run paused"
			case s.RunState != "":
				state = "run ended: " + s.RunState
			}
			seen := ""
			if s.SeenFrom == "reused" {
				seen = " (opened before these files; seen reused)"
			}
			fmt.Fprintf(w, "  keyHash=%s tool=%s scope=%s run=%s opened %s — %s%s\n",
				safe(s.KeyHash), safe(s.Tool), safe(s.Scope), safe(s.RunID), stamp(s.OpenedAt), safe(state), seen)
		}
	}
	if len(r.FailedCloses) > 0 {
		fmt.Fprintf(w, "\nFAILED CLOSES (%d)\n", len(r.FailedCloses))
		for _, f := range r.FailedCloses {
			fmt.Fprintf(w, "  keyHash=%s tool=%s scope=%s reason=%s run=%s at %s — %s: %s\n",
				safe(f.KeyHash), safe(f.Tool), safe(f.Scope), safe(f.Reason), safe(f.RunID), stamp(f.At), safe(f.ErrorClass), safe(f.Error))
		}
	}
	if len(r.EndedRuns) > 0 {
		fmt.Fprintf(w, "\nRUNS THAT ENDED WITH RUN-SCOPED SESSIONS OPEN (%d)\n", len(r.EndedRuns))
		for _, er := range r.EndedRuns {
			fmt.Fprintf(w, "  run=%s ended %s at %s:\n", safe(er.RunID), safe(er.Outcome), stamp(er.EndedAt))
			for _, s := range er.Sessions {
				fate := "still open"
				if s.ClosedBy != "" {
					fate = "closed later by " + safe(s.ClosedBy)
				}
				fmt.Fprintf(w, "    keyHash=%s tool=%s — %s\n", safe(s.KeyHash), safe(s.Tool), fate)
			}
		}
	}
	fmt.Fprintln(w)
	if r.Problems() {
		fmt.Fprintf(w, "result: %d still open, %d failed closes, %d runs ended with sessions open\n", len(r.Open), len(r.FailedCloses), len(r.EndedRuns))
	} else {
		fmt.Fprintln(w, "result: every session closed")
	}
}

func printFiles(w io.Writer, files []audit.File, events int) {
	var names []string
	bad := 0
	for _, f := range files {
		names = append(names, filepath.Base(f.Path))
		bad += f.Bad
	}
	fmt.Fprintf(w, "read %s: %d events, %d bad lines\n", strings.Join(names, ", "), events, bad)
	for _, f := range files {
		switch {
		case f.Missing:
			fmt.Fprintf(w, "  %s: does not exist\n", f.Path)
		case f.Err != "":
			fmt.Fprintf(w, "  %s: %s\n", f.Path, f.Err)
		}
		for _, b := range f.BadLines {
			fmt.Fprintf(w, "  %s line %d: %s\n", filepath.Base(f.Path), b.Line, b.Reason)
		}
		if f.Bad > len(f.BadLines) {
			fmt.Fprintf(w, "  %s: %d more bad lines\n", filepath.Base(f.Path), f.Bad-len(f.BadLines))
		}
	}
}

func reasons(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", safe(k), m[k]))
	}
	return strings.Join(parts, " ")
}

// safe renders a string read from a file for a terminal: "-" when empty,
// quoted when it holds anything a terminal would interpret.
func safe(s string) string {
	if s == "" {
		return "-"
	}
	return audit.Printable(s)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func newEventsStatsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats FILE",
		Short: "Count events by type and runs, with p50/p95/p99 of model and tool durations",
		Long: `Read FILE (and FILE.1, the older generation, first) and print counts by
event type, the runs and how their last turn ended, token totals, and the
p50/p95/p99 of model-call and tool-call durations (nearest rank).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s := audit.Summarize(args)
			for _, f := range s.Files {
				if f.Missing {
					return failure(fmt.Errorf("%s does not exist", f.Path))
				}
				if f.Err != "" {
					return failure(fmt.Errorf("reading %s: %s", f.Path, f.Err))
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(s); err != nil {
					return failure(err)
				}
				return nil
			}
			printStats(cmd.OutOrStdout(), s)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the figures as JSON")
	return cmd
}

func printStats(w io.Writer, s *audit.Summary) {
	printFiles(w, s.Files, s.Events)
	if !s.First.IsZero() {
		fmt.Fprintf(w, "from %s to %s (%s)\n", stamp(s.First), stamp(s.Last), s.Last.Sub(s.First).Round(time.Millisecond))
	}
	var outcomes []string
	for o, n := range s.Outcomes {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", safe(o), n))
	}
	sort.Strings(outcomes)
	fmt.Fprintf(w, "runs: %d", s.Runs)
	if len(outcomes) > 0 {
		fmt.Fprintf(w, " (last turn: %s)", strings.Join(outcomes, ", "))
	}
	fmt.Fprintf(w, "\ntokens: %d in, %d out\n\n", s.InputTokens, s.OutputTokens)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DURATIONS\tCOUNT\tP50\tP95\tP99\tMAX\t")
	row := func(name string, d audit.Durations) {
		if d.Count == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\t-\t\n", name)
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", name, d.Count, ms(d.P50), ms(d.P95), ms(d.P99), ms(d.Max))
	}
	row("llm calls", s.LLM)
	row("tool calls", s.Tool)
	for _, t := range s.PerTool {
		row("  "+safe(t.Tool), t.Durations)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nEVENTS BY TYPE")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, tc := range s.ByType {
		fmt.Fprintf(tw, "  %d\t%s\n", tc.Count, safe(tc.Type))
	}
	tw.Flush()
}

func ms(v float64) string {
	return (time.Duration(v * float64(time.Millisecond))).Round(time.Microsecond).String()
}
