package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/host"
)

func init() { commands = append(commands, newConfigCmd) }

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration file of agentry serve",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Check a configuration file of agentry serve without starting it",
		Long: `Check a configuration file of agentry serve as serve --config FILE would
read it, without starting anything: every key must be a serve flag's name
holding a value of its type, no value may be a secret (name a file or an
environment variable instead), and the settings must make sense together.
Every problem is reported as FILE:LINE; the exit status is 1 when there is
one. See docs/config.md.`,
		Example: "  agentry config check agentry.toml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return checkConfigFile(args[0], cmd.OutOrStdout())
		},
	})
	return cmd
}

// checkConfigFile reads path into a fresh serve's flags and runs the
// checks serve makes before it opens anything.
func checkConfigFile(path string, stdout io.Writer) error {
	var o serveOptions
	serve := newServeCmdWith(&o)
	flags := serve.Flags()
	o.configPath = path
	if err := o.readConfig(flags); err != nil {
		return failure(err)
	}
	if err := o.takeProfiles(flags); err != nil {
		return failure(fmt.Errorf("%s: %w", path, err))
	}
	if err := checkServeSettings(&o); err != nil {
		return failure(fmt.Errorf("%s: %w", path, err))
	}
	if n := len(o.profiles); n > 0 {
		fmt.Fprintf(stdout, "%s: ok (%d settings, %d agent profiles: %s)\n", path, len(o.conf.file.settings), n, describeAgents(o.profiles, o.defaultAgent))
		return nil
	}
	fmt.Fprintf(stdout, "%s: ok (%d settings)\n", path, len(o.conf.file.settings))
	return nil
}

// checkEnv stands in for serve's environment when a model's spec is
// checked: any key will do (serve reads its own when it starts), and
// base URLs and hosts keep their defaults.
func checkEnv(name string) string {
	if strings.HasSuffix(name, "_KEY") {
		return "set-at-start"
	}
	return ""
}

// checkServeSettings makes the checks of serve's options that touch
// nothing: no socket, store, model or jail is opened.
func checkServeSettings(o *serveOptions) error {
	flags := o.conf.flags
	if err := o.check(); err != nil {
		return err
	}
	if len(o.profiles) == 0 {
		if err := checkAgentFlags(flags, o.agent, "workspaces", "lend", "agent-credential"); err != nil {
			return err
		}
	}
	if _, _, err := o.creds.parse(); err != nil {
		return err
	}
	if _, err := o.creds.keyring(); err != nil {
		return err
	}
	for _, p := range o.profiles {
		if p.kind != kindNative || p.model == "" {
			continue
		}
		if _, err := parseModel(p.model, checkEnv); err != nil {
			return usageError("agents.%s.model: %v", p.name, err)
		}
	}
	if err := o.oidc.check(flags); err != nil {
		return err
	}
	if _, err := o.caps.jail(); err != nil {
		return err
	}
	if o.pool < 0 {
		return usageError("--pool %d: give a count of interpreters, or 0 for none", o.pool)
	}
	switch o.runner {
	case "", runnerProcess, runnerInterpreter, runnerJail:
	default:
		return usageError("unknown --runner %q; use %s", o.runner, runnerKinds)
	}
	if err := checkNativeClone(*o); err != nil {
		return err
	}
	// The model's spec, read as serve reads it; the keys it needs come
	// from serve's environment when it starts, so any stands in for them.
	if _, err := parseModel(o.model, checkEnv); err != nil {
		return err
	}
	if o.agent == "acp" {
		if _, err := splitCommand(o.acp.cmd); err != nil {
			return usageError("--agent-cmd: %v", err)
		}
	}
	if o.tokens != "" {
		t, err := host.LoadTokens(o.tokens)
		if err != nil {
			return usageError("--tokens: %v", err)
		}
		if t.Len() == 0 {
			return usageError("--tokens %s admits nobody; add a line with agentry token --tenant T --principal P --tokens %s", o.tokens, o.tokens)
		}
	}
	if _, _, err := loadBudgets(o.budgets); err != nil {
		return usageError("--budgets: %v", err)
	}
	if o.store == "" {
		return usageError("--store is empty; pass a SQLite file path (agentry.db) or a postgres:// URL")
	}
	return nil
}
