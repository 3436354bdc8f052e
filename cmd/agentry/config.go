package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/host"
)

// maxConfigBytes bounds a configuration file: a serve's holds a few dozen
// keys.
const maxConfigBytes = 1 << 20

// configFile is a configuration file of agentry serve as read: each key
// is the name of one of serve's flags (without the dashes), with the
// value it gives and the line it is on.
type configFile struct {
	path     string
	settings []setting // in file order, each key once
	// agents are the [agents.NAME] profiles, in file order;
	// defaultAgent names the one a conversation gets when its person
	// picks none (default-agent; default: the first).
	agents       []agentProfile
	defaultAgent string
}

// setting is one key of a configuration file.
type setting struct {
	key  string
	line int
	// vals are what the flag is set to: one value, or each element of an
	// array (a list flag).
	vals []string
	list bool
}

// lineError is a refusal that points at a line of a configuration file.
type lineError struct {
	path string
	line int
	msg  string
}

func (e *lineError) Error() string {
	if e.line <= 0 {
		return e.path + ": " + e.msg
	}
	return fmt.Sprintf("%s:%d: %s", e.path, e.line, e.msg)
}

// parseConfig reads a configuration file's TOML: every key must name one
// of flags and hold a value of the flag's type (a string, a whole number,
// true or false, a duration in quotes, an array of strings), and no value
// may be a secret (name an environment variable or a file instead). Every
// refusal says path:line, and every problem in the file is reported, in
// line order.
func parseConfig(path string, b []byte, flags *pflag.FlagSet) (*configFile, error) {
	var doc map[string]any
	if err := toml.Unmarshal(b, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, &lineError{path: path, line: row, msg: strings.TrimPrefix(de.Error(), "toml: ") + " (TOML syntax)"}
		}
		return nil, &lineError{path: path, msg: err.Error()}
	}
	lines := keyLines(b)
	cf := &configFile{path: path}
	var errs []*lineError
	for key, v := range doc {
		line := lines[key]
		switch key {
		case "agents":
			ps, perrs := parseProfiles(path, v, lines)
			cf.agents, errs = ps, append(errs, perrs...)
			continue
		case "default-agent":
			d, ok := v.(string)
			if !ok || host.CheckAgentName(d) != nil {
				errs = append(errs, &lineError{path: path, line: line, msg: "default-agent names one of the [agents.NAME] profiles, in quotes"})
			}
			cf.defaultAgent = d
			continue
		}
		s, msg := checkSetting(key, v, flags)
		if msg != "" {
			errs = append(errs, &lineError{path: path, line: line, msg: msg})
			continue
		}
		s.line = line
		cf.settings = append(cf.settings, s)
	}
	slices.SortFunc(cf.settings, func(a, b setting) int { return cmp.Compare(a.line, b.line) })
	if len(errs) == 0 {
		errs = cf.checkProfiles(lines, flags)
	}
	if len(errs) > 0 {
		return nil, joinLineErrors(errs)
	}
	return cf, nil
}

// checkProfiles checks the profiles against the rest of the file (and the
// command line's flags): the default names one, no top-level key says
// what profiles say, and credentials have the key that seals them.
func (c *configFile) checkProfiles(lines map[string]int, flags *pflag.FlagSet) []*lineError {
	var errs []*lineError
	if len(c.agents) == 0 {
		if c.defaultAgent != "" {
			errs = append(errs, &lineError{path: c.path, line: lines["default-agent"], msg: "default-agent names an agent profile, and the file has none; add [agents." + c.defaultAgent + "] or remove default-agent"})
		}
		return errs
	}
	names := make([]string, len(c.agents))
	for i, p := range c.agents {
		names[i] = p.name
	}
	if c.defaultAgent == "" {
		c.defaultAgent = names[0]
	} else if !slices.Contains(names, c.defaultAgent) {
		errs = append(errs, &lineError{path: c.path, line: lines["default-agent"],
			msg: fmt.Sprintf("default-agent %q is not one of the profiles (%s)", c.defaultAgent, strings.Join(names, ", "))})
	}
	for _, s := range c.settings {
		if s.key == "agent" || s.key == "lend" || s.key == "agent-credential" || slices.Contains(acpFlagNames, s.key) {
			errs = append(errs, &lineError{path: c.path, line: s.line,
				msg: fmt.Sprintf("%s: with [agents.NAME] profiles each profile says which agent it runs and how; move %s into the profiles, or drop the profiles", s.key, s.key)})
		}
	}
	_, keyInFile := c.value("credentials-key-file")
	keyFile := keyInFile || flags != nil && flags.Changed("credentials-key-file")
	for _, p := range c.agents {
		if len(p.credentials) > 0 && !keyFile {
			errs = append(errs, &lineError{path: c.path, line: p.lines["credentials"],
				msg: fmt.Sprintf("agents.%s.credentials: credentials need --credentials-key-file (credentials-key-file = \"FILE\" in this file): people's credentials are kept sealed, never in clear", p.name)})
		}
	}
	return errs
}

// joinLineErrors joins refusals in line order.
func joinLineErrors(errs []*lineError) error {
	slices.SortStableFunc(errs, func(a, b *lineError) int { return cmp.Compare(a.line, b.line) })
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// keyLines maps each key of a TOML document (dotted, with its table's
// path in front) to the line it is on. The document has decoded already,
// so it parses.
func keyLines(b []byte) map[string]int {
	lines := map[string]int{}
	var p unstable.Parser
	p.Reset(b)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		var parts []string
		line := 0
		for it := e.Key(); it.Next(); {
			n := it.Node()
			if line == 0 {
				line = p.Shape(n.Raw).Start.Line
			}
			parts = append(parts, string(n.Data))
		}
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = parts
		case unstable.KeyValue:
			parts = append(slices.Clone(table), parts...)
		default:
			continue
		}
		// Every prefix of a key is on the line where it first appears.
		for i := 1; i <= len(parts); i++ {
			k := strings.Join(parts[:i], ".")
			if _, seen := lines[k]; !seen {
				lines[k] = line
			}
		}
	}
	return lines
}

// checkSetting turns one top-level key and its decoded value into the
// setting of a flag, or says why it cannot be one.
func checkSetting(key string, v any, flags *pflag.FlagSet) (setting, string) {
	if key == "config" {
		return setting{}, `"config" cannot be set in a configuration file: it names one file, given on the command line`
	}
	fl := flags.Lookup(key)
	if fl != nil && fl.Deprecated != "" {
		return setting{}, fmt.Sprintf("%s is an old name (--%s is deprecated: %s); use the new name", key, key, fl.Deprecated)
	}
	if fl == nil || fl.Hidden {
		if _, ok := v.(map[string]any); ok {
			return setting{}, fmt.Sprintf("unknown table %q: the keys are serve's flag names at the top of the file, e.g. max-turns = 8", key)
		}
		return setting{}, fmt.Sprintf("unknown key %q: serve has no --%s flag (the keys are serve's flag names; see agentry serve --help)", key, key)
	}
	s := setting{key: key}
	typ := fl.Value.Type()
	switch typ {
	case "bool":
		b, ok := v.(bool)
		if !ok {
			return s, fmt.Sprintf("%s takes true or false, not %s", key, tomlKind(v))
		}
		s.vals = []string{strconv.FormatBool(b)}
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		n, ok := v.(int64)
		if !ok {
			return s, fmt.Sprintf("%s takes a whole number (e.g. %s = 8), not %s", key, key, tomlKind(v))
		}
		s.vals = []string{strconv.FormatInt(n, 10)}
	case "duration":
		d, ok := v.(string)
		if !ok {
			return s, fmt.Sprintf("%s takes a duration in quotes (e.g. %s = \"30s\"), not %s", key, key, tomlKind(v))
		}
		if _, err := time.ParseDuration(d); err != nil {
			return s, fmt.Sprintf("%s: %q is not a duration (e.g. \"30s\", \"5m\", \"1h\")", key, d)
		}
		s.vals = []string{d}
	case "stringArray", "stringSlice":
		arr, ok := v.([]any)
		if !ok {
			return s, fmt.Sprintf("%s takes an array of strings (e.g. %s = [\"a\", \"b\"]), not %s", key, key, tomlKind(v))
		}
		s.list = true
		for i, e := range arr {
			str, ok := e.(string)
			if !ok {
				return s, fmt.Sprintf("%s[%d] is %s; %s takes strings only", key, i, tomlKind(e), key)
			}
			s.vals = append(s.vals, str)
		}
	default:
		str, ok := v.(string)
		if !ok {
			return s, fmt.Sprintf("%s takes a string in quotes, not %s", key, tomlKind(v))
		}
		s.vals = []string{str}
	}
	for _, val := range s.vals {
		if why := inlineSecret(key, val); why != "" {
			return s, why
		}
	}
	return s, ""
}

// tomlKind names the TOML type of a decoded value, for a refusal (never
// the value itself: it may be a secret put in the wrong key).
func tomlKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "a whole number"
	case float64:
		return "a number with a fraction"
	case bool:
		return "true or false"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// secretPrefixes start credentials that are easy to recognise: agentry's
// own tokens, model vendors' and code hosts' keys, private keys.
var secretPrefixes = []string{"agt_", "sk-", "ghp_", "gho_", "ghs_", "github_pat_", "glpat-", "xoxb-", "xoxp-", "AKIA", "ASIA", "-----BEGIN"}

// inlineSecret says why val, the value of key, is a secret that must not
// sit in a configuration file, or returns "". The refusal never repeats
// the value.
func inlineSecret(key, val string) string {
	for _, p := range secretPrefixes {
		if strings.HasPrefix(strings.TrimSpace(val), p) {
			return fmt.Sprintf("%s holds what looks like a secret (it starts %q): a configuration file holds no secrets; "+
				"name a file (a token belongs in the tokens file) or an environment variable instead", key, p)
		}
	}
	switch key {
	case "store":
		if u, err := url.Parse(val); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
			if _, has := u.User.Password(); has || u.Query().Has("password") {
				return "store: the postgres URL holds a password; put it in the PGPASSWORD environment variable or a ~/.pgpass file (the driver reads both), not in the configuration file"
			}
		}
	case "agent-env":
		if name, ok := inlineEnvName(val); ok {
			return fmt.Sprintf("agent-env: %q gives a value; in a configuration file name the variable only (%q) and serve passes the agent its own value, so a secret stays in serve's environment", name+"=…", name)
		}
	}
	return ""
}

// apply sets every flag the file gives a value and the command line did
// not set: flags override the file. A value the flag refuses is reported
// with its line.
func (c *configFile) apply(flags *pflag.FlagSet) error {
	var errs []*lineError
	for _, s := range c.settings {
		fl := flags.Lookup(s.key)
		if fl == nil || fl.Changed {
			continue
		}
		if err := setFlag(flags, fl, s); err != nil {
			errs = append(errs, &lineError{path: c.path, line: s.line, msg: err.Error()})
		}
	}
	if len(errs) > 0 {
		return joinLineErrors(errs)
	}
	return nil
}

// setFlag sets fl to what s gives, as the command line would have.
func setFlag(flags *pflag.FlagSet, fl *pflag.Flag, s setting) error {
	if sv, ok := fl.Value.(pflag.SliceValue); ok && s.list {
		if err := sv.Replace(s.vals); err != nil {
			return fmt.Errorf("%s: %v", s.key, err)
		}
		fl.Changed = true
		return nil
	}
	for _, v := range s.vals {
		if err := flags.Set(s.key, v); err != nil {
			return fmt.Errorf("%s: %v", s.key, err)
		}
	}
	return nil
}

// value returns what the file gives key, and whether it gives one.
func (c *configFile) value(key string) ([]string, bool) {
	for _, s := range c.settings {
		if s.key == key {
			return s.vals, true
		}
	}
	return nil, false
}
