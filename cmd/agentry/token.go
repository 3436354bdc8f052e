package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

func init() { commands = append(commands, newTokenCmd) }

func newTokenCmd() *cobra.Command {
	var tenant, principal, file, expires string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make, list and revoke the bearer tokens of agentry serve",
		Long: `Make a bearer token that proves one tenant and principal to agentry serve.
The token is printed once on stdout; the tokens file keeps only its SHA-256
digest, with when it was made and, with --expires, when it stops working
(serve refuses it from then on with token_expired). With --tokens the line
is appended to that file (created 0600); without it the line is printed on
stderr for you to place. A running serve reads the file again within a
second of a change (and on SIGHUP).

agentry token list shows who each token admits; agentry token revoke
removes tokens from the file.`,
		Example: `  agentry token --tenant acme --principal alice --tokens tokens.txt
  agentry token --tenant acme --principal bob --expires 30d --tokens tokens.txt
  agentry token list --tokens tokens.txt
  agentry token revoke --tokens tokens.txt 3f2a9c1b7d4e`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" || principal == "" {
				return usageError("agentry token needs --tenant and --principal (or a subcommand: list, revoke)")
			}
			var ttl time.Duration
			if expires != "" {
				d, err := parseLifetime(expires)
				if err != nil {
					return usageError("--expires %q: %v", expires, err)
				}
				ttl = d
			}
			tok, line, err := host.GenerateToken(tool.Identity{Tenant: tenant, Principal: principal})
			if err != nil {
				return usageError("%v", err)
			}
			now := time.Now().UTC().Truncate(time.Second)
			line += " created=" + now.Format(time.RFC3339)
			if ttl > 0 {
				line += " expires=" + now.Add(ttl).Format(time.RFC3339)
			}
			if file == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), line)
			} else if err := appendLine(file, line); err != nil {
				return failure(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant the token proves (required)")
	cmd.Flags().StringVar(&principal, "principal", "", "the principal the token proves (required)")
	cmd.Flags().StringVar(&file, "tokens", "", "append the digest line to this tokens file")
	cmd.Flags().StringVar(&expires, "expires", "", "the token stops working this long after it is made: 30d, 12h, 90m (default: never)")
	cmd.AddCommand(newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

// parseLifetime reads a duration with a day unit as well: 30d, 36h, 1d12h.
func parseLifetime(s string) (time.Duration, error) {
	var days int
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("write it as 30d, 12h or 90m")
		}
		days, s = n, s[i+1:]
	}
	var rest time.Duration
	if s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("write it as 30d, 12h or 90m")
		}
		rest = d
	}
	total := time.Duration(days)*24*time.Hour + rest
	if total < time.Minute {
		return 0, fmt.Errorf("a token must live a minute at least")
	}
	return total, nil
}

func appendLine(file, line string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("opening the tokens file: %w", err)
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the tokens file: %w", err)
	}
	return nil
}

func newTokenListCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List who the tokens of a tokens file admit",
		Long: `List the tokens of a tokens file: an id (the first 12 hex digits of the
token's digest, what agentry token revoke takes), the principal, tenant,
role, when it expires and when it was made. Neither a token nor its whole
digest is shown.`,
		Example: `  agentry token list --tokens tokens.txt`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := host.LoadTokens(file)
			if err != nil {
				return failure(err)
			}
			printTokens(cmd.OutOrStdout(), t.Info(), time.Now())
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "tokens", "", "the tokens file (required)")
	_ = cmd.MarkFlagRequired("tokens")
	return cmd
}

func printTokens(w io.Writer, infos []host.TokenInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPRINCIPAL\tTENANT\tROLE\tEXPIRES\tCREATED")
	stamp := func(t time.Time, none string) string {
		if t.IsZero() {
			return none
		}
		return t.Format(time.RFC3339)
	}
	for _, i := range infos {
		role := string(i.Role)
		if role == "" {
			role = "-"
		}
		exp := stamp(i.Expires, "never")
		if !i.Expires.IsZero() && !now.Before(i.Expires) {
			exp += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Principal, i.Tenant, role, exp, stamp(i.Created, "-"))
	}
	_ = tw.Flush()
}

func newTokenRevokeCmd() *cobra.Command {
	var file, tenant, principal string
	cmd := &cobra.Command{
		Use:   "revoke [ID...]",
		Short: "Remove tokens from a tokens file",
		Long: `Remove tokens from a tokens file: each ID (as agentry token list shows it,
or any longer start of the digest; it must name one token), or with
--tenant and --principal every token of that principal. The file is
replaced at once (a new file renamed over it); a running serve refuses the
removed tokens within about a second, and conversations of others go on.`,
		Example: `  agentry token revoke --tokens tokens.txt 3f2a9c1b7d4e
  agentry token revoke --tokens tokens.txt --tenant acme --principal alice`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			drop, err := revokeMatcher(file, ids, tenant, principal)
			if err != nil {
				return err
			}
			removed, err := host.RevokeTokens(file, drop)
			if err != nil {
				return failure(err)
			}
			if len(removed) == 0 {
				return failure(fmt.Errorf("no such token is in %s (any more); agentry token list --tokens %s shows them", file, file))
			}
			for _, i := range removed {
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (%s/%s)\n", i.ID, i.Tenant, i.Principal)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "tokens", "", "the tokens file (required)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "with --principal: revoke every token of this tenant's principal")
	cmd.Flags().StringVar(&principal, "principal", "", "with --tenant: revoke every token of this principal")
	_ = cmd.MarkFlagRequired("tokens")
	return cmd
}

// revokeMatcher works out which tokens a revoke names: ids (each naming
// exactly one token of the file), or every token of one principal.
func revokeMatcher(file string, ids []string, tenant, principal string) (func(host.TokenInfo) bool, error) {
	byOwner := tenant != "" || principal != ""
	switch {
	case byOwner && (tenant == "" || principal == ""):
		return nil, usageError("--tenant and --principal go together")
	case byOwner && len(ids) > 0:
		return nil, usageError("name tokens by ID or by --tenant and --principal, not both")
	case !byOwner && len(ids) == 0:
		return nil, usageError("name the tokens to revoke: IDs from agentry token list --tokens %s, or --tenant and --principal", file)
	case byOwner:
		return func(i host.TokenInfo) bool { return i.Tenant == tenant && i.Principal == principal }, nil
	}
	t, err := host.LoadTokens(file)
	if err != nil {
		return nil, failure(err)
	}
	full := map[string]bool{} // the whole 12-digit IDs named
	for _, id := range ids {
		id = strings.ToLower(strings.TrimPrefix(id, "sha256:"))
		if len(id) < 6 {
			return nil, usageError("token ID %q is too short; give 6 hex digits at least (agentry token list shows 12)", id)
		}
		var hits []string
		for _, i := range t.Info() {
			if strings.HasPrefix(i.ID, id) || (len(id) > len(i.ID) && strings.HasPrefix(id, i.ID)) {
				hits = append(hits, i.ID)
			}
		}
		switch len(hits) {
		case 0:
			return nil, failure(fmt.Errorf("no token with ID %s in %s; agentry token list --tokens %s shows them", id, file, file))
		case 1:
			full[hits[0]] = true
		default:
			return nil, usageError("token ID %s names %d tokens; give more digits", id, len(hits))
		}
	}
	return func(i host.TokenInfo) bool { return full[i.ID] }, nil
}
