package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider/acp"
)

// Agent profiles: the [agents.NAME] tables of a configuration file. Each
// names one agent serve offers side by side with the others; a person
// picks one when opening a conversation (POST /v1/sessions {"agent":
// NAME}), and default-agent names the one a conversation gets otherwise.

// Profile kinds.
const (
	kindACP    = "acp"
	kindNative = "native"
)

// maxProfiles bounds the agent profiles of one file.
const maxProfiles = 32

// agentProfile is one [agents.NAME] table as read.
type agentProfile struct {
	name string
	line int
	kind string
	// acp holds an ACP profile's settings, as the --agent-* flags would.
	acp acpFlags
	// models are the models a person may choose; acp.model (an ACP
	// profile) or model (a native one's --model spec) the default.
	models []string
	model  string
	lend   []string
	// credentials maps an environment variable of the agent to the name
	// of the person's credential that fills it.
	credentials map[string]string
	// lines maps each key of the table to its line.
	lines map[string]int
}

// profileKeys are the keys a profile of each kind may hold.
var profileKeys = map[string][]string{
	kindACP:    {"kind", "command", "env", "home", "mode", "allow-host", "fs", "auth", "model", "models", "pool", "lend", "credentials"},
	kindNative: {"kind", "model"},
}

var (
	envName        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	credentialName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

// parseProfiles reads the value of the agents key: a table of tables,
// one per profile. Every problem is a lineError.
func parseProfiles(path string, v any, lines map[string]int) ([]agentProfile, []*lineError) {
	tbl, ok := v.(map[string]any)
	if !ok {
		return nil, []*lineError{{path: path, line: lines["agents"], msg: "agents is a table of agent profiles ([agents.claude], [agents.native] …), not " + tomlKind(v)}}
	}
	if len(tbl) > maxProfiles {
		return nil, []*lineError{{path: path, line: lines["agents"], msg: fmt.Sprintf("%d agent profiles; serve offers at most %d", len(tbl), maxProfiles)}}
	}
	var out []agentProfile
	var errs []*lineError
	for name, pv := range tbl {
		p, perrs := parseProfile(path, name, pv, lines)
		errs = append(errs, perrs...)
		if len(perrs) == 0 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b agentProfile) int { return a.line - b.line })
	return out, errs
}

// parseProfile reads one [agents.NAME] table.
func parseProfile(path, name string, v any, lines map[string]int) (agentProfile, []*lineError) {
	at := "agents." + name
	p := agentProfile{name: name, line: lines[at], lines: map[string]int{}}
	fail := func(line int, format string, args ...any) (agentProfile, []*lineError) {
		return p, []*lineError{{path: path, line: line, msg: fmt.Sprintf(format, args...)}}
	}
	if err := host.CheckAgentName(name); err != nil {
		return fail(p.line, "[%s]: an agent's name is 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter (people pick it by name)", at)
	}
	tbl, ok := v.(map[string]any)
	if !ok {
		return fail(p.line, "%s is %s; an agent profile is a table ([%s] and its keys below it)", at, tomlKind(v), at)
	}
	for k := range tbl {
		p.lines[k] = lines[at+"."+k]
	}
	p.kind = kindACP
	if k, ok := tbl["kind"]; ok {
		s, _ := k.(string)
		if s != kindACP && s != kindNative {
			return fail(p.lines["kind"], "%s.kind is native (agentry's own agent) or acp (a coding agent over the Agent Client Protocol)", at)
		}
		p.kind = s
	} else if _, ok := tbl["command"]; !ok {
		return fail(p.line, `[%s] says neither kind nor command: give an ACP agent's command = "…", or kind = "native" for agentry's own agent`, at)
	}
	r := profileReader{path: path, at: at, tbl: tbl, lines: p.lines}
	for k := range tbl {
		if !slices.Contains(profileKeys[p.kind], k) {
			r.refuse(k, "unknown key %q in a %s profile; it takes %s", k, p.kind, strings.Join(profileKeys[p.kind], ", "))
		}
	}
	if p.kind == kindNative {
		p.model = r.str("model")
		return p, r.errs
	}
	a := &p.acp
	a.cmd, a.env, a.home, a.mode = r.str("command"), r.strs("env"), r.str("home"), r.str("mode")
	a.allowHosts, a.fs, a.auth, a.model, a.pool = r.strs("allow-host"), r.str("fs"), r.str("auth"), r.str("model"), r.int("pool")
	p.model, p.models, p.lend = a.model, r.strs("models"), r.strs("lend")
	p.credentials = r.table("credentials")
	a.creds, _ = profileCredentials(p.credentials)
	if len(r.errs) > 0 {
		return p, r.errs
	}
	r.checkACP(&p)
	return p, r.errs
}

// secretNames are parts of a variable's name that say it holds a secret.
var secretNames = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"}

// envSecret says why an env entry of a profile may not give its value
// in the file, or returns "". A profile may set fixed settings
// (DISABLE_TELEMETRY=1, a local model server's URL); a variable whose
// name says it holds a secret is named only, and serve passes the agent
// its own value. The refusal never repeats the value.
func envSecret(entry string) string {
	name, val, ok := strings.Cut(entry, "=")
	if !ok {
		return ""
	}
	up := strings.ToUpper(name)
	for _, s := range secretNames {
		if strings.Contains(up, s) {
			return fmt.Sprintf("%q gives a value, and its name says it holds a secret; name the variable only (%q) and serve passes the agent its own value", name+"=…", name)
		}
	}
	if why := inlineSecret("env", val); why != "" {
		return fmt.Sprintf("%q gives what looks like a secret; name the variable only (%q) and serve passes the agent its own value", name+"=…", name)
	}
	return ""
}

// profileReader reads a profile's keys by type, collecting refusals.
type profileReader struct {
	path, at string
	tbl      map[string]any
	lines    map[string]int
	errs     []*lineError
}

func (r *profileReader) refuse(key, format string, args ...any) {
	line := r.lines[key]
	if key == "" {
		line = 0
	}
	r.errs = append(r.errs, &lineError{path: r.path, line: line, msg: r.at + "." + key + ": " + fmt.Sprintf(format, args...)})
}

// secret refuses a value that is a secret, as a top-level key's would be.
func (r *profileReader) secret(key, flag, val string) bool {
	if why := inlineSecret(flag, val); why != "" {
		r.refuse(key, "%s", strings.TrimPrefix(strings.TrimPrefix(why, flag+": "), flag+" "))
		return true
	}
	return false
}

func (r *profileReader) str(key string) string {
	v, ok := r.tbl[key]
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.refuse(key, "takes a string in quotes, not %s", tomlKind(v))
		return ""
	}
	if r.secret(key, key, s) {
		return ""
	}
	return s
}

func (r *profileReader) strs(key string) []string {
	v, ok := r.tbl[key]
	if !ok {
		return nil
	}
	arr, ok := v.([]any)
	if !ok {
		r.refuse(key, "takes an array of strings (e.g. %s = [\"a\", \"b\"]), not %s", key, tomlKind(v))
		return nil
	}
	var out []string
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			r.refuse(key, "[%d] is %s; it takes strings only", i, tomlKind(e))
			return nil
		}
		if r.secret(key, key, s) {
			return nil
		}
		if key == "env" {
			if why := envSecret(s); why != "" {
				r.refuse(key, "%s", why)
				return nil
			}
		}
		out = append(out, s)
	}
	return out
}

func (r *profileReader) int(key string) int {
	v, ok := r.tbl[key]
	if !ok {
		return 0
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > acp.MaxPool {
		r.refuse(key, "takes a whole number from 0 to %d", acp.MaxPool)
		return 0
	}
	return int(n)
}

// table reads an inline table of strings: credentials = {VAR = "name"}.
func (r *profileReader) table(key string) map[string]string {
	v, ok := r.tbl[key]
	if !ok {
		return nil
	}
	t, ok := v.(map[string]any)
	if !ok {
		r.refuse(key, "takes a table of variable = credential name, e.g. %s = { ANTHROPIC_API_KEY = \"anthropic\" }, not %s", key, tomlKind(v))
		return nil
	}
	out := map[string]string{}
	for name, cv := range t {
		s, ok := cv.(string)
		switch {
		case !envName.MatchString(name):
			r.refuse(key, "%q is not an environment variable's name", name)
		case !ok:
			r.refuse(key, "%s is %s; give the name of a credential in quotes", name, tomlKind(cv))
		case r.secret(key, key, s):
		case !credentialName.MatchString(s):
			r.refuse(key, "%s: %q is not a credential's name (1 to 64 of a-z, 0-9, '.', '_' and '-'); the credential itself is stored with PUT /v1/credentials/{name}", name, s)
		default:
			out[name] = s
		}
	}
	return out
}

// checkACP checks an ACP profile as serve would build it, naming the
// profile's keys.
func (r *profileReader) checkACP(p *agentProfile) {
	if p.acp.cmd == "" {
		r.refuse("command", `an ACP profile needs the agent's command, e.g. command = "claude-agent-acp"`)
		return
	}
	if len(p.models) > host.MaxAgentModels {
		r.refuse("models", "%d models; at most %d", len(p.models), host.MaxAgentModels)
	}
	for _, m := range p.models {
		if m == "" || len(m) > 256 || strings.ContainsFunc(m, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			r.refuse("models", "%q is not a model's name (1 to 256 printable characters)", m)
		}
	}
	for _, name := range p.lend {
		if name != "run_code" {
			r.refuse("lend", "%q: the host tool there is to lend is run_code", name)
		}
	}
	if _, err := p.acp.raw("/", true); err != nil {
		var ce *acp.ConfigError
		if errors.As(err, &ce) {
			key, rest := profileKeyOf(ce.Field)
			r.refuse(key, "%s%s", rest, ce.Problem)
			return
		}
		r.refuse("", "%v", err)
	}
}

// profileKeyOf names the profile key a field of acp.Config comes from,
// and what of it (an index) is at fault.
func profileKeyOf(field string) (key, rest string) {
	for _, m := range [][2]string{{"command", "command"}, {"env", "env"}, {"home", "home"}, {"mode", "mode"},
		{"allowHosts", "allow-host"}, {"fs", "fs"}, {"authMethod", "auth"}, {"model", "model"}, {"pool", "pool"}, {"credentials", "credentials"}} {
		if field == m[0] || strings.HasPrefix(field, m[0]+"[") {
			if rest = strings.TrimPrefix(field, m[0]); rest != "" {
				rest += ": "
			}
			return m[1], rest
		}
	}
	return "", field + ": "
}

// raw is the definition's configuration the flags give, its sessions'
// workspaces under root, each agent's HOME kept beside its workspace when
// keepHome is set (serve: a conversation's agent finds its memory again
// after a restart). A setting it refuses is an *acp.ConfigError naming
// the field.
func (a acpFlags) raw(root string, keepHome bool) (json.RawMessage, error) {
	argv, err := splitCommand(a.cmd)
	if err != nil {
		return nil, &acp.ConfigError{Field: "command", Problem: err.Error()}
	}
	c := acp.Config{Command: argv, Env: a.env, Mode: a.mode, AllowHosts: a.allowHosts, FS: a.fs, WorkspaceRoot: root,
		AuthMethod: a.auth, Model: a.model, Pool: a.pool, Credentials: a.creds, KeepHome: keepHome}
	if a.home != "" {
		h, err := filepath.Abs(a.home)
		if err != nil {
			return nil, &acp.ConfigError{Field: "home", Problem: err.Error()}
		}
		if fi, err := os.Stat(h); err != nil || !fi.IsDir() {
			return nil, &acp.ConfigError{Field: "home", Problem: a.home + " is not a directory"}
		}
		c.Home = h
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if _, err := acp.ParseConfig(raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// fingerprint is what a reload compares to tell that the profiles
// changed (they need a restart).
func fingerprint(ps []agentProfile, def string) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s|%s|%#v|%q|%q|%q|%v\n", p.name, p.kind, p.acp, p.models, p.model, p.lend, p.credentials)
	}
	return b.String() + "default=" + def
}
