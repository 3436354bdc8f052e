package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/price"
)

func init() { commands = append(commands, newUsageCmd) }

func newUsageCmd() *cobra.Command {
	var store, tenant, by, since, until string
	var asJSON, asCSV bool
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Sum what the turns a host ran used and cost",
		Long: `Read the usage records a host's store keeps (one per turn) and sum them by
principal, day, model or conversation: turns, model calls, tokens, tool
calls, sandbox time and estimated cost in US dollars. Turns whose cost is
unknown (a model the price table lacks) are counted apart, never as zero.
This is the operator's view, straight from the store; a person reads their
own with GET /v1/usage.`,
		Example: `  agentry usage --store agentry.db --by day --since 7d
  agentry usage --store postgres://agentry@db/agentry --tenant acme --by principal --csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON && asCSV {
				return usageError("--json and --csv: choose one")
			}
			now := time.Now()
			q := host.UsageQuery{Tenant: tenant}
			var err error
			if q.Since, err = host.ParseUsageTime(since, now); err != nil {
				return usageError("--since: %v", err)
			}
			if until != "" {
				if q.Until, err = host.ParseUsageTime(until, now); err != nil {
					return usageError("--until: %v", err)
				}
			}
			st, err := openStore(cmd.Context(), store)
			if err != nil {
				return failure(err)
			}
			defer st.Close()
			recs, err := st.UsageRecords(cmd.Context(), q)
			if err != nil {
				return failure(err)
			}
			rows, err := host.SummarizeUsage(recs, by)
			if err != nil {
				return usageError("--by: %v", err)
			}
			rows = append(rows, host.TotalUsage(recs))
			if len(recs) >= host.MaxUsageRecords {
				fmt.Fprintf(cmd.ErrOrStderr(), "agentry: more than %d turns matched; these sums stop there: narrow --since/--until\n", host.MaxUsageRecords)
			}
			out := cmd.OutOrStdout()
			switch {
			case asJSON:
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"by": by, "since": q.Since.UTC(), "rows": rows})
			case asCSV:
				w := csv.NewWriter(out)
				_ = w.Write([]string{by, "turns", "model_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "tool_calls", "sandbox_seconds", "cost_usd", "unknown_cost_turns"})
				for _, r := range rows {
					_ = w.Write(usageCells(r))
				}
				w.Flush()
				return w.Error()
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "%s\tturns\tmodel calls\tinput\toutput\tcache read\tcache write\ttool calls\tsandbox s\tcost USD\tunknown cost\t\n", by)
			for _, r := range rows {
				for _, c := range usageCells(r) {
					fmt.Fprintf(tw, "%s\t", c)
				}
				fmt.Fprintln(tw)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", "agentry.db", "the host's store: a SQLite file, or a postgres:// URL")
	f.StringVar(&tenant, "tenant", "", "one tenant's turns (default: every tenant's)")
	f.StringVar(&by, "by", "principal", "sum by principal, day, model or conversation")
	f.StringVar(&since, "since", "30d", "turns that ended since: an age (7d, 12h), a date (2026-12-01) or an RFC 3339 time")
	f.StringVar(&until, "until", "", "turns that ended before this time (same forms as --since)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&asCSV, "csv", false, "print CSV")
	return cmd
}

func usageCells(r host.UsageRow) []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []string{r.Key, i(r.Turns), i(r.ModelCalls), i(r.InputTokens), i(r.OutputTokens), i(r.CacheReadTokens), i(r.CacheWriteTokens),
		i(r.ToolCalls), strconv.FormatFloat(r.SandboxSeconds, 'f', 3, 64), strconv.FormatFloat(r.CostUSD, 'f', 6, 64), i(r.UnknownCostTurns)}
}

// loadPrices reads --prices: the operator's price table, or the shipped
// one when the flag is empty.
func loadPrices(path string) (*price.Table, error) {
	if path == "" {
		return price.Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the price table: %w", err)
	}
	return price.Parse(b)
}
