package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/internal/jsonerr"
)

// Config is a definition's configuration (provider.Definition.Config): the
// agent an instance runs, one process per session. It is JSON, read
// strictly by [ParseConfig]:
//
//	{
//	  "command": ["claude-code-acp"],
//	  "env": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL=http://127.0.0.1:8080", "PATH"],
//	  "home": "/etc/agentry/claude-home",
//	  "mode": "acceptEdits",
//	  "allowHosts": ["api.anthropic.com:443"],
//	  "workspaceRoot": "/srv/agentry/workspaces",
//	  "limits": {"startTimeout": "60s", "stopTimeout": "5s"}
//	}
type Config struct {
	// Command is the agent's argv. Required.
	Command []string `json:"command"`
	// Env is everything the agent sees besides HOME: NAME=VALUE, or NAME
	// alone to copy the host's value when the instance is materialised (a
	// NAME the host does not have is left out, and readiness says so when
	// the agent needs it). HOME is the launcher's and may not be set.
	Env []string `json:"env,omitempty"`
	// Home is a template directory (absolute) copied into each session's
	// private HOME: how an agent's own configuration file reaches it.
	Home string `json:"home,omitempty"`
	// Mode is the ACP session mode new sessions start in
	// (session/set_mode); empty keeps the agent's default.
	Mode string `json:"mode,omitempty"`
	// AllowHosts are the host:port pairs the agent may reach, passed to the
	// launcher (the jail enforces them; the unjailed launcher cannot).
	AllowHosts []string `json:"allowHosts,omitempty"`
	// WorkspaceRoot (absolute) holds every session's working directory: a
	// session whose working directory is not at or under it is refused.
	// Required.
	WorkspaceRoot string `json:"workspaceRoot"`
	// FS is which of ACP's file calls the client offers the agent: empty
	// (the default) for fs/read_text_file and fs/write_text_file, or
	// FSWrite for writes only. With FSWrite the agent reads its files
	// itself, where its launcher confines it (the jail shows it its
	// workspace, as to its shell), and every write still comes through
	// the client: confined to the workspace and recorded. An agent that
	// cannot tell a missing file the client reports from a failed read
	// needs it to create files (Gemini CLI: docs/acp.md).
	FS string `json:"fs,omitempty"`
	// AuthMethod is the id of the authentication method the client asks
	// the agent for (authenticate) right after initialize, when the agent
	// lists it: codex-acp's "api-key", which reads the key from the
	// agent's environment (env). A method the agent does not list is
	// refused with the ones it does. Empty: the first env-var method whose
	// variables env gives, if any.
	AuthMethod string `json:"authMethod,omitempty"`
	// Credentials are variables each session's agent gets from the
	// person it serves rather than from the host: the session's
	// configuration carries their values ({"credentials": {VAR: value}},
	// which agentry's host fills from the person's stored credentials),
	// and a session without one of them is refused. They are not given
	// to probes, nor to terminals; with them the instance keeps no pool
	// (a pooled agent starts before anyone's credentials are known).
	Credentials []Credential `json:"credentials,omitempty"`
	// Model is the model new sessions start with: the value of the
	// agent's model option (session/set_config_option), refused with the
	// values the agent offers when it is not one of them. A session's
	// configuration may name another. Empty keeps the agent's default.
	Model string `json:"model,omitempty"`
	// KeepHome gives each session's agent a HOME that outlives its
	// process: the directory <working directory>.home beside the
	// session's working directory (its links resolved), made from Home
	// the first time and found again by every later agent of the session.
	// What an agent keeps of its sessions there (Claude Code's
	// ~/.claude/projects) is what its session/load reads, so a session
	// resumed after a restart of the host or an eviction finds its memory.
	// A pooled agent's HOME lies beside its workspace and goes with it to
	// the session that takes it. RemoveWorkspace removes a workspace with
	// its HOME. Without KeepHome each agent's HOME is private to its
	// process and goes with it.
	KeepHome bool `json:"keepHome,omitempty"`
	// Pool is how many agents the instance keeps started and initialised
	// ahead of need, each in a fresh confinement with an empty workspace
	// of its own and its session opened there with Mode and Model, bound
	// to a session only when one opens and never reused (0, the default:
	// none; at most MaxPool).
	Pool int `json:"pool,omitempty"`
	// Limits bound what one session may do.
	Limits Limits `json:"limits,omitzero"`
	// UsageTotals says the agent's prompt responses report running totals
	// for the session rather than what the turn used: the turn's usage is
	// then the difference from the totals before it. Without it each
	// report is taken as the turn's own.
	UsageTotals bool `json:"usageTotals,omitempty"`
}

// Credential is one of [Config.Credentials].
type Credential struct {
	// Var is the variable the agent sees the credential as.
	Var string `json:"var"`
	// Name is the person's credential it comes from (the host's
	// /v1/credentials/{name}); the adapter only carries it.
	Name string `json:"name"`
	// AuthMethod is the authentication method the credential feeds: the
	// client asks the agent for it (authenticate) instead of
	// Config.AuthMethod. Empty: Config.AuthMethod's choice.
	AuthMethod string `json:"authMethod,omitempty"`
}

// MaxCredentials bounds [Config.Credentials] and a session's credentials.
const MaxCredentials = 64

// MaxPool bounds [Config.Pool].
const MaxPool = 64

// FSWrite is [Config.FS] for a client that offers only
// fs/write_text_file.
const FSWrite = "write"

// Limits bound one session. Zero values are the defaults.
type Limits struct {
	// StartTimeout bounds starting an agent: launch, initialize,
	// authenticate, session/new (or load, resume) and set_mode (default
	// 60s, at most 10m).
	StartTimeout Duration `json:"startTimeout,omitempty"`
	// StopTimeout is how long a stopping agent has between SIGTERM and
	// SIGKILL (default 5s, at most 1m).
	StopTimeout Duration `json:"stopTimeout,omitempty"`
	// MaxTerminals bounds the terminals one session holds at once
	// (default 8, at most 64).
	MaxTerminals int `json:"maxTerminals,omitempty"`
	// TerminalOutputBytes caps the output a terminal keeps; an agent may
	// ask for less, never more (default 1 MiB, at most 16 MiB).
	TerminalOutputBytes int `json:"terminalOutputBytes,omitempty"`
	// MaxFileBytes bounds one fs/read_text_file or fs/write_text_file
	// (default 8 MiB, at most 64 MiB).
	MaxFileBytes int `json:"maxFileBytes,omitempty"`
	// MaxClientRequests bounds the requests one session's agent may have
	// in flight at once with the client (fs, terminals, permissions,
	// elicitations, host tools over MCP); past it a request is answered
	// with an error at once (default 32, at most 1024). An agent refused
	// 8 times this many within 10 seconds is flooding: it is stopped.
	MaxClientRequests int `json:"maxClientRequests,omitempty"`
	// ClientRequestTimeout bounds a request the client serves by itself
	// (fs, terminal create, output, kill, release), and how long the agent
	// may leave what the client sends it unread (default 1m, at most 1h).
	ClientRequestTimeout Duration `json:"clientRequestTimeout,omitempty"`
	// ClientWaitTimeout bounds a request that waits on a person or a
	// command (session/request_permission, elicitation/create,
	// terminal/wait_for_exit, a host tool over MCP) (default 30m, at most
	// 24h).
	ClientWaitTimeout Duration `json:"clientWaitTimeout,omitempty"`
}

// Limit defaults and ceilings.
const (
	DefaultStartTimeout         = 60 * time.Second
	MaxStartTimeout             = 10 * time.Minute
	DefaultStopTimeout          = 5 * time.Second
	MaxStopTimeout              = time.Minute
	DefaultMaxTerminals         = 8
	MaxMaxTerminals             = 64
	DefaultTerminalOutputBytes  = 1 << 20
	MaxTerminalOutputBytes      = 16 << 20
	DefaultMaxFileBytes         = 8 << 20
	MaxMaxFileBytes             = 64 << 20
	DefaultMaxClientRequests    = 32
	MaxMaxClientRequests        = 1024
	DefaultClientRequestTimeout = time.Minute
	MaxClientRequestTimeout     = time.Hour
	DefaultClientWaitTimeout    = 30 * time.Minute
	MaxClientWaitTimeout        = 24 * time.Hour
)

// Duration is a time.Duration written in JSON as a string ("30s").
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration is a string such as "30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(`a duration is a string such as "30s"`)
	}
	*d = Duration(v)
	return nil
}

// ConfigError refuses a configuration. It names the field and the
// problem, never the value (an env entry may hold a key).
type ConfigError struct {
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return "acp: the configuration is unusable: " + e.Problem
	}
	return "acp: the configuration's " + e.Field + " is unusable: " + e.Problem
}

func bad(field, format string, args ...any) error {
	return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ParseConfig reads a definition's configuration: one JSON object with at
// most the fields of [Config] (unknown fields are refused, so a misspelt
// field cannot quietly drop a limit), checked, with zero limits given
// their defaults. NAME-only env entries are kept as they are; the driver
// resolves them.
func ParseConfig(raw []byte) (Config, error) {
	var c Config
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return Config{}, bad("", "it is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, &ConfigError{Problem: jsonerr.Describe(err, "it has a field Config does not define (check the spelling)")}
	}
	if dec.More() {
		return Config{}, bad("", "it holds more than one JSON value")
	}
	if err := c.check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) check() error {
	if len(c.Env) == 0 {
		c.Env = nil
	}
	if len(c.AllowHosts) == 0 {
		c.AllowHosts = nil
	}
	if len(c.Command) == 0 {
		return bad("command", "it is empty; give the agent's argv, such as [\"claude-code-acp\"]")
	}
	if len(c.Command) > 256 {
		return bad("command", "it has more than 256 arguments")
	}
	for i, a := range c.Command {
		if err := checkText(a, 4096, i > 0); err != nil {
			return bad(fmt.Sprintf("command[%d]", i), "%v", err)
		}
	}
	seen := map[string]bool{}
	if len(c.Env) > 256 {
		return bad("env", "it has more than 256 entries")
	}
	for i, kv := range c.Env {
		name, value, hasValue := strings.Cut(kv, "=")
		field := fmt.Sprintf("env[%d]", i)
		if err := checkEnvName(name); err != nil {
			return bad(field, "%v", err)
		}
		if name == "HOME" {
			return bad(field, "HOME is the launcher's (a private copy of home); set home instead")
		}
		if seen[name] {
			return bad(field, "the variable %s is listed twice", name)
		}
		seen[name] = true
		if hasValue {
			if len(value) > 32<<10 || strings.IndexByte(value, 0) >= 0 {
				return bad(field, "a value is at most 32 KiB with no NUL byte")
			}
		}
	}
	if c.Home != "" {
		if err := checkDir(c.Home); err != nil {
			return bad("home", "%v", err)
		}
	}
	if c.Mode != "" {
		if err := checkText(c.Mode, 128, false); err != nil {
			return bad("mode", "%v", err)
		}
	}
	for field, v := range map[string]string{"authMethod": c.AuthMethod, "model": c.Model} {
		if v == "" {
			continue
		}
		if err := checkText(v, 256, false); err != nil {
			return bad(field, "%v", err)
		}
	}
	if err := c.checkCredentials(seen); err != nil {
		return err
	}
	if c.Pool < 0 || c.Pool > MaxPool {
		return bad("pool", "it must be between 0 and %d", MaxPool)
	}
	if c.FS != "" && c.FS != FSWrite {
		return bad("fs", "it is %q (writes only) or empty (reads and writes)", FSWrite)
	}
	hosts := map[string]bool{}
	if len(c.AllowHosts) > 256 {
		return bad("allowHosts", "it has more than 256 entries")
	}
	for i, hp := range c.AllowHosts {
		field := fmt.Sprintf("allowHosts[%d]", i)
		if err := checkHostPort(hp); err != nil {
			return bad(field, "%v", err)
		}
		if hosts[hp] {
			return bad(field, "it is listed twice")
		}
		hosts[hp] = true
	}
	if c.WorkspaceRoot == "" {
		return bad("workspaceRoot", "it is missing; name the directory that holds the sessions' workspaces")
	}
	if err := checkDir(c.WorkspaceRoot); err != nil {
		return bad("workspaceRoot", "%v", err)
	}
	return c.Limits.normalise()
}

// checkCredentials refuses credentials with an unusable variable, one
// env already sets, two authentication methods, or a pool.
func (c *Config) checkCredentials(env map[string]bool) error {
	if len(c.Credentials) == 0 {
		c.Credentials = nil
		return nil
	}
	if len(c.Credentials) > MaxCredentials {
		return bad("credentials", "it has more than %d entries", MaxCredentials)
	}
	vars := map[string]bool{}
	auth := ""
	for i, cr := range c.Credentials {
		field := fmt.Sprintf("credentials[%d]", i)
		if err := checkEnvName(cr.Var); err != nil {
			return bad(field, "%v", err)
		}
		switch {
		case cr.Var == "HOME" || cr.Var == "PATH":
			return bad(field, "%s is the launcher's; name another variable", cr.Var)
		case env[cr.Var]:
			return bad(field, "the variable %s is set by env too; give it one source", cr.Var)
		case vars[cr.Var]:
			return bad(field, "the variable %s is listed twice", cr.Var)
		}
		vars[cr.Var] = true
		if err := checkText(cr.Name, 64, false); err != nil {
			return bad(field, "the name: %v", err)
		}
		if cr.AuthMethod != "" {
			if err := checkText(cr.AuthMethod, 256, false); err != nil {
				return bad(field, "the authMethod: %v", err)
			}
			if auth != "" && auth != cr.AuthMethod {
				return bad(field, "it feeds the authentication method %s and another credential %s; a session authenticates once", cr.AuthMethod, auth)
			}
			auth = cr.AuthMethod
		}
	}
	if c.Pool > 0 {
		return bad("pool", "it cannot be used with credentials: a pooled agent starts before anyone's credentials are known")
	}
	return nil
}

// sessionAuth is the authentication method a session's agent is asked
// for: the one its credentials feed, else the definition's.
func (c *Config) sessionAuth() string {
	for _, cr := range c.Credentials {
		if cr.AuthMethod != "" {
			return cr.AuthMethod
		}
	}
	return c.AuthMethod
}

func (l *Limits) normalise() error {
	dur := func(field string, d *Duration, def, max time.Duration) error {
		switch {
		case *d == 0:
			*d = Duration(def)
		case *d < 0 || time.Duration(*d) > max:
			return bad("limits."+field, "it must be positive and at most %s", max)
		}
		return nil
	}
	num := func(field string, n *int, def, max int) error {
		switch {
		case *n == 0:
			*n = def
		case *n < 0 || *n > max:
			return bad("limits."+field, "it must be between 1 and %d", max)
		}
		return nil
	}
	return errors.Join(
		dur("startTimeout", &l.StartTimeout, DefaultStartTimeout, MaxStartTimeout),
		dur("stopTimeout", &l.StopTimeout, DefaultStopTimeout, MaxStopTimeout),
		num("maxTerminals", &l.MaxTerminals, DefaultMaxTerminals, MaxMaxTerminals),
		num("terminalOutputBytes", &l.TerminalOutputBytes, DefaultTerminalOutputBytes, MaxTerminalOutputBytes),
		num("maxFileBytes", &l.MaxFileBytes, DefaultMaxFileBytes, MaxMaxFileBytes),
		num("maxClientRequests", &l.MaxClientRequests, DefaultMaxClientRequests, MaxMaxClientRequests),
		dur("clientRequestTimeout", &l.ClientRequestTimeout, DefaultClientRequestTimeout, MaxClientRequestTimeout),
		dur("clientWaitTimeout", &l.ClientWaitTimeout, DefaultClientWaitTimeout, MaxClientWaitTimeout),
	)
}

// checkText accepts 1..max bytes of UTF-8 without control characters
// (empty too when mayBeEmpty).
func checkText(s string, max int, mayBeEmpty bool) error {
	switch {
	case s == "" && !mayBeEmpty:
		return errors.New("it is empty")
	case len(s) > max:
		return fmt.Errorf("it is longer than %d bytes", max)
	case !utf8.ValidString(s):
		return errors.New("it is not UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return errors.New("it holds a control character")
		}
	}
	return nil
}

func checkEnvName(name string) error {
	if name == "" || len(name) > 256 {
		return errors.New("a variable name is 1 to 256 characters")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return errors.New("a variable name has only letters, digits and '_', and does not start with a digit")
		}
	}
	return nil
}

func checkDir(p string) error {
	if err := checkText(p, 4096, false); err != nil {
		return err
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return errors.New("it must be an absolute, clean path")
	}
	return nil
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" {
		return errors.New("it is not host:port")
	}
	if checkText(host, 253, false) != nil || strings.ContainsAny(host, " /?#@") {
		return errors.New("the host is malformed")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return errors.New("the port must be a number from 1 to 65535")
	}
	return nil
}

// resolveEnv turns NAME-only entries into NAME=VALUE from lookup,
// leaving out those lookup does not have; it returns the names left out.
func resolveEnv(env []string, lookup func(string) (string, bool)) (out, missing []string) {
	for _, kv := range env {
		if strings.Contains(kv, "=") {
			out = append(out, kv)
			continue
		}
		if v, ok := lookup(kv); ok {
			out = append(out, kv+"="+v)
		} else {
			missing = append(missing, kv)
		}
	}
	return out, missing
}

// SessionConfig is what a session's configuration
// (CreateRequest.Configuration, and Resume's) may say: empty, or a JSON
// object with at most these fields.
type SessionConfig struct {
	// Mode overrides the definition's mode for this session.
	Mode string `json:"mode,omitempty"`
	// Model overrides the definition's model for this session.
	Model string `json:"model,omitempty"`
	// Credentials are the values of the definition's credentials
	// (Config.Credentials), by variable: the person's own secrets. They
	// are never logged nor echoed in an error.
	Credentials map[string]string `json:"credentials,omitempty"`
}

// ParseSessionConfig reads a session's configuration, strictly.
func ParseSessionConfig(raw []byte) (SessionConfig, error) {
	var c SessionConfig
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return c, nil
	}
	if t[0] != '{' {
		return SessionConfig{}, errors.New(`acp: the session configuration is not a JSON object; pass empty, or {"mode":"...","model":"..."}`)
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		return SessionConfig{}, errors.New(`acp: the session configuration is unusable; pass empty, or {"mode":"...","model":"..."}`)
	}
	if c.Mode != "" {
		if err := checkText(c.Mode, 128, false); err != nil {
			return SessionConfig{}, fmt.Errorf("acp: the session configuration's mode is unusable: %v", err)
		}
	}
	if c.Model != "" {
		if err := checkText(c.Model, 256, false); err != nil {
			return SessionConfig{}, fmt.Errorf("acp: the session configuration's model is unusable: %v", err)
		}
	}
	if len(c.Credentials) > MaxCredentials {
		return SessionConfig{}, fmt.Errorf("acp: the session configuration has more than %d credentials", MaxCredentials)
	}
	for name, v := range c.Credentials {
		if err := checkEnvName(name); err != nil {
			return SessionConfig{}, fmt.Errorf("acp: the session configuration's credential variable is unusable: %v", err)
		}
		if v == "" || len(v) > 32<<10 || strings.IndexByte(v, 0) >= 0 {
			return SessionConfig{}, fmt.Errorf("acp: the session configuration's credential %s is unusable: a value is 1 byte to 32 KiB with no NUL byte", name)
		}
	}
	return c, nil
}

// credentialEnv is the environment a session's agent starts with: the
// definition's, and the session's credentials, each of which the
// definition must declare and the session must give.
func (in *instance) credentialEnv(sc SessionConfig) ([]string, error) {
	declared := map[string]bool{}
	var missing []string
	env := slices.Clone(in.env)
	for _, cr := range in.cfg.Credentials {
		declared[cr.Var] = true
		v, ok := sc.Credentials[cr.Var]
		if !ok {
			missing = append(missing, cr.Var+" (credential "+cr.Name+")")
			continue
		}
		env = append(env, cr.Var+"="+v)
	}
	for name := range sc.Credentials {
		if !declared[name] {
			return nil, fmt.Errorf("acp: the session configuration gives the credential %s, which the definition does not declare (credentials); the agent sees only declared ones", name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%w: the session's configuration does not give %s", ErrMissingCredentials, strings.Join(missing, ", "))
	}
	return env, nil
}
