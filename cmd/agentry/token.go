package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

func init() { commands = append(commands, newTokenCmd) }

func newTokenCmd() *cobra.Command {
	var tenant, principal, file string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make a bearer token for agentry serve",
		Long: `Make a bearer token that proves one tenant and principal to agentry serve.
The token is printed once on stdout; the tokens file keeps only its SHA-256
digest. With --tokens the line is appended to that file (created 0600);
without it the line is printed on stderr for you to place.`,
		Example: `  agentry token --tenant acme --principal alice --tokens tokens.txt`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, line, err := host.GenerateToken(tool.Identity{Tenant: tenant, Principal: principal})
			if err != nil {
				return usageError("%v", err)
			}
			if file == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), line)
			} else {
				f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return failure(fmt.Errorf("opening the tokens file: %w", err))
				}
				_, err = fmt.Fprintln(f, line)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return failure(fmt.Errorf("writing the tokens file: %w", err))
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant the token proves (required)")
	cmd.Flags().StringVar(&principal, "principal", "", "the principal the token proves (required)")
	cmd.Flags().StringVar(&file, "tokens", "", "append the digest line to this tokens file")
	_ = cmd.MarkFlagRequired("tenant")
	_ = cmd.MarkFlagRequired("principal")
	return cmd
}
