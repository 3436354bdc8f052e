package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// renamedFlag is a flag whose old name still works for one release: it
// sets the same value as the new one, is hidden from help, and using it
// prints one deprecation line on stderr.
type renamedFlag struct{ old, new string }

// renamedServeFlags are serve's flags renamed to say what they count.
var renamedServeFlags = []renamedFlag{
	{old: "max-open-sessions", new: "max-conversations-per-principal"},
	{old: "max-live-sessions", new: "max-live-tool-sessions"},
}

// aliasRenamed adds each renamed flag's old name to f, bound to the value
// the new name already holds, and hides it from help. Call it after the
// new names are defined.
func aliasRenamed(f *pflag.FlagSet, renamed []renamedFlag) {
	for _, r := range renamed {
		nf := f.Lookup(r.new)
		f.Var(nf.Value, r.old, nf.Usage)
		f.Lookup(r.old).DefValue = nf.DefValue
		_ = f.MarkHidden(r.old)
	}
}

// warnRenamed prints a deprecation line on stderr for each old name used,
// and refuses a command line that gives both names of one flag.
func warnRenamed(f *pflag.FlagSet, renamed []renamedFlag, stderr io.Writer) error {
	for _, r := range renamed {
		if !f.Changed(r.old) {
			continue
		}
		if f.Changed(r.new) {
			return usageError("--%s and --%s are one flag (the old and the new name); give only --%s", r.old, r.new, r.new)
		}
		fmt.Fprintf(stderr, "agentry: --%s is deprecated and goes in the next release; use --%s\n", r.old, r.new)
	}
	return nil
}
