package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// serveConfig is where serve's options came from: the configuration file
// as last read, serve's flags, and which of them the command line set
// (the file cannot change those, at start or at a reload).
type serveConfig struct {
	file    *configFile
	flags   *pflag.FlagSet
	cmdline map[string]bool
	sum     [sha256.Size]byte // of the file's bytes as last read
}

// readConfig reads --config, when given, into serve's flags: the file
// sets every flag the command line did not.
func (o *serveOptions) readConfig(flags *pflag.FlagSet) error {
	if o.configPath == "" {
		return nil
	}
	cmdline := map[string]bool{}
	flags.Visit(func(f *pflag.Flag) { cmdline[f.Name] = true })
	cf, sum, err := readConfigSum(o.configPath, flags)
	if err != nil {
		return usageError("--config: %v", err)
	}
	if err := cf.apply(flags); err != nil {
		return usageError("--config: %v", err)
	}
	o.conf = &serveConfig{file: cf, flags: flags, cmdline: cmdline, sum: sum}
	return nil
}

// readConfigSum is readConfig that also returns the digest of what it
// read, so that a watcher can tell a change.
func readConfigSum(path string, flags *pflag.FlagSet) (*configFile, [sha256.Size]byte, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("reading the configuration file: %w", err)
	}
	sum := sha256.Sum256(b)
	if len(b) > maxConfigBytes {
		return nil, sum, fmt.Errorf("%s: the configuration file is over %d bytes; a serve's needs a few hundred", path, maxConfigBytes)
	}
	cf, err := parseConfig(path, b, flags)
	return cf, sum, err
}

// effective is the value key has once next replaces the file: the
// command line's when it set key, else the file's, else the flag's
// default. current is the value serve runs with.
func (c *serveConfig) effective(next *configFile, key, current string) string {
	if c == nil || next == nil || c.cmdline[key] {
		return current
	}
	if vals, ok := next.value(key); ok && len(vals) > 0 {
		return vals[0]
	}
	if fl := c.flags.Lookup(key); fl != nil {
		return fl.DefValue
	}
	return current
}

// changed lists the keys whose values differ between the file as last
// read and next, leaving out those the command line sets.
func (c *serveConfig) changed(next *configFile) []string {
	var keys []string
	seen := map[string]bool{}
	for _, f := range []*configFile{c.file, next} {
		for _, s := range f.settings {
			if seen[s.key] || c.cmdline[s.key] {
				continue
			}
			seen[s.key] = true
			a, _ := c.file.value(s.key)
			b, _ := next.value(s.key)
			if !slices.Equal(a, b) {
				keys = append(keys, s.key)
			}
		}
	}
	if fingerprint(c.file.agents, c.file.defaultAgent) != fingerprint(next.agents, next.defaultAgent) {
		keys = append(keys, "agents")
	}
	slices.Sort(keys)
	return keys
}

// reloadHook applies, at a reload, the value its key has then (see
// serveConfig.effective), and says in a few words what it applied for
// the reload's log line. It runs at every reload, changed key or not: the
// file it names may have changed. An error keeps what ran before.
type reloadHook func(value string) (applied string, err error)

// reloadable is one key a reload applies.
type reloadable struct {
	key  string
	hook reloadHook
}

// onReload makes key change at runtime: what build steps call for what
// they can swap while serving. Budgets and approval rules join here.
func (s *server) onReload(key string, h reloadHook) {
	s.reloads = append(s.reloads, reloadable{key: key, hook: h})
}

// currentValue is the value serve runs with for key.
func (s *server) currentValue(key string) string {
	if v, ok := s.running[key]; ok {
		return v
	}
	if s.o.conf != nil {
		if fl := s.o.conf.flags.Lookup(key); fl != nil {
			return fl.Value.String()
		}
	}
	return ""
}

// reload re-reads the configuration file (when serve has one), applies
// what can change at runtime, and logs one line naming what it applied
// and what needs a restart. A file that no longer reads is refused whole:
// the running configuration stays.
func (s *server) reload(why string) {
	c := s.o.conf
	var next *configFile
	var restart []string
	if c != nil {
		cf, sum, err := readConfigSum(c.file.path, c.flags)
		c.sum = sum
		if err != nil {
			fmt.Fprintf(s.stderr, "agentry serve: %s: reload refused, serving on as before: %v\n", why, oneLine(err.Error()))
			return
		}
		next = cf
		restart = c.changed(next)
	}
	if c == nil && len(s.reloads) == 0 {
		fmt.Fprintf(s.stderr, "agentry serve: %s: there is no --tokens or --config file to reload; serving on\n", why)
		return
	}
	var applied, failed []string
	for _, r := range s.reloads {
		value := c.effective(next, r.key, s.currentValue(r.key))
		restart = slices.DeleteFunc(restart, func(k string) bool { return k == r.key })
		what, err := r.hook(value)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s kept as before (%s)", r.key, oneLine(err.Error())))
			continue
		}
		s.running[r.key] = value
		applied = append(applied, r.key+": "+what)
	}
	if c != nil {
		c.file = next
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agentry serve: %s: reloaded", why)
	if len(applied) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(applied, "; "))
	} else {
		b.WriteString(" nothing (no setting changes while serving)")
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "; %s", strings.Join(failed, "; "))
	}
	if len(restart) > 0 {
		fmt.Fprintf(&b, "; changed but needs a restart: %s", strings.Join(restart, ", "))
	}
	fmt.Fprintln(s.stderr, b.String())
}

// configChanged reports whether the configuration file's bytes differ
// from those last read (a file that cannot be read has not changed: the
// reload would be refused anyway, and is when the file comes back).
func (c *serveConfig) configChanged() bool {
	b, err := readBounded(c.file.path)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(b)
	return !bytes.Equal(sum[:], c.sum[:])
}

// configPoll is how often serve looks at its configuration file for a
// change: reading a small file and hashing it is cheap, and it works on
// every filesystem (an inotify watch misses a file replaced by a rename
// into a watched directory on some, and edits on network mounts).
const configPoll = 2 * time.Second

// readBounded reads a configuration file, up to one byte past the bound
// (so that one over it is told).
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
}
