// Command agentry runs agents whose tools hold live sessions, serves them,
// and reads their event files.
//
//	agentry demo      a self-explaining tour on offline defaults
//	agentry version   print the version
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// commands collects the subcommands; each file adds its own in init.
var commands []func() *cobra.Command

// exitError carries an exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks a mistake in how the command was called (exit 2).
func usageError(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// failure marks a command that ran and failed (exit 1).
func failure(err error) error { return &exitError{code: 1, err: err} }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "agentry",
		Short:         "A runtime for AI agents whose tools hold live sessions",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	for _, c := range commands {
		root.AddCommand(c())
	}
	return root
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// The first SIGINT/SIGTERM cancels ctx: commands then close their tool
	// sessions within a bound. Once it has, the signals get their default
	// meaning back, so a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	root := newRoot()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "agentry:", err)
	return exitCode(err)
}

// exitCode maps a command's error to the process's exit status: 0 on
// success, the code an exitError carries, and 2 for cobra's own errors
// (unknown command, bad arguments), which are usage errors.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}
