package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// acpFlags are the --agent-* flags of run and serve: the ACP agent each
// session runs.
type acpFlags struct {
	cmd        string
	env        []string
	home, mode string
	allowHosts []string
	fs         string
	auth       string
	model      string
	pool       int
	creds      []acp.Credential // serve's --agent-credential
}

func (a *acpFlags) add(f *pflag.FlagSet) {
	f.StringVar(&a.cmd, "agent-cmd", "", "with --agent acp: the agent's command, 'COMMAND ARGS' (quote with ' or \"), e.g. 'claude-agent-acp'")
	f.StringArrayVar(&a.env, "agent-env", nil, "with --agent acp: NAME passes this process's value of the variable NAME (export it first); the agent sees only these (repeat). serve refuses NAME=VALUE, which every local user could read in ps")
	f.StringVar(&a.home, "agent-home", "", "with --agent acp: a directory copied into each session's private HOME (the agent's own config files)")
	f.StringVar(&a.mode, "agent-mode", "", "with --agent acp: the ACP session mode sessions start in (e.g. default, acceptEdits, plan)")
	f.StringArrayVar(&a.allowHosts, "agent-allow-host", nil, "with --agent acp: a HOST:PORT the jailed agent may reach, such as its model API (repeat)")
	f.StringVar(&a.auth, "agent-auth", "", "with --agent acp: the agent's authentication method to use (its id, e.g. api-key for codex-acp, which reads the key from --agent-env OPENAI_API_KEY)")
	f.StringVar(&a.model, "agent-model", "", "with --agent acp: the model sessions start with, among those the agent offers (a session's configuration may choose another)")
	f.IntVar(&a.pool, "agent-pool", 0, "with --agent acp: keep N agents started and initialised ahead of need, each jailed with an empty workspace, taken by new conversations and never reused")
	f.StringVar(&a.fs, "agent-fs", "", "with --agent acp: write to offer the agent ACP's file writes only, so it reads its workspace itself in the jail (Gemini CLI needs it to create files)")
}

// acpFlagNames are the flags acpFlags adds.
var acpFlagNames = []string{"agent-cmd", "agent-env", "agent-home", "agent-mode", "agent-allow-host", "agent-fs", "agent-auth", "agent-model", "agent-pool"}

// inlineEnvName is the variable's name when entry, an --agent-env value
// or an agent-env key of the configuration file, carries its value
// (NAME=VALUE) rather than naming a variable of this process.
func inlineEnvName(entry string) (name string, inline bool) {
	name, _, inline = strings.Cut(entry, "=")
	return name, inline
}

// inlineEnvProblem says why --agent-env NAME=VALUE on the command line is
// a leak, and the fix; it never repeats the value.
func inlineEnvProblem(name string) string {
	return fmt.Sprintf("--agent-env %s=… puts the value on the command line, where every local user can read it (ps, /proc/PID/cmdline) for as long as the process runs; "+
		"export %s in this process's environment and pass --agent-env %s", name, name, name)
}

// checkInlineEnv refuses (serve: a standing process other users' ps
// sees for days) or, for a one-off command of one person (run), warns
// about --agent-env entries that carry their value. Neither says the value.
func checkInlineEnv(env []string, refuse bool, warn io.Writer) error {
	for _, e := range env {
		name, inline := inlineEnvName(e)
		if !inline {
			continue
		}
		if refuse {
			return usageError("%s", inlineEnvProblem(name))
		}
		fmt.Fprintf(warn, "agentry: WARNING: %s\n", inlineEnvProblem(name))
	}
	return nil
}

// checkAgentFlags refuses --agent-* flags with another agent than acp,
// and an unknown --agent.
func checkAgentFlags(f *pflag.FlagSet, agent string, extra ...string) error {
	switch agent {
	case "native", "acp":
	default:
		return usageError("--agent %q: use native (agentry's own agent) or acp (a coding agent over the Agent Client Protocol, with --agent-cmd)", agent)
	}
	if agent == "acp" {
		if f.Lookup("agent-cmd") == nil || !f.Changed("agent-cmd") {
			return usageError("--agent acp needs --agent-cmd 'COMMAND ARGS', e.g. --agent-cmd claude-agent-acp")
		}
		return nil
	}
	for _, name := range append(append([]string{}, acpFlagNames...), extra...) {
		if fl := f.Lookup(name); fl != nil && fl.Changed {
			return usageError("--%s is for --agent acp; --agent native does not take it", name)
		}
	}
	return nil
}

// config is the definition's configuration, its sessions' workspaces
// under root (and their agents' HOMEs beside them with keepHome).
func (a acpFlags) config(root string, keepHome bool) (json.RawMessage, error) {
	raw, err := a.raw(root, keepHome)
	if err != nil {
		var ce *acp.ConfigError
		if errors.As(err, &ce) {
			return nil, usageError("--agent-*: %s", flagOf(ce))
		}
		return nil, failure(err)
	}
	return raw, nil
}

// flagOf names the flag a configuration field came from.
func flagOf(ce *acp.ConfigError) string {
	f := ce.Field
	for _, m := range [][2]string{{"command", "--agent-cmd"}, {"env", "--agent-env"}, {"home", "--agent-home"},
		{"mode", "--agent-mode"}, {"allowHosts", "--agent-allow-host"}, {"fs", "--agent-fs"},
		{"authMethod", "--agent-auth"}, {"model", "--agent-model"}, {"pool", "--agent-pool"}, {"credentials", "--agent-credential"}} {
		if f == m[0] || strings.HasPrefix(f, m[0]+"[") {
			return m[1] + strings.TrimPrefix(f, m[0]) + ": " + ce.Problem
		}
	}
	return ce.Error()
}

// splitCommand splits 'COMMAND ARGS' into words: blanks separate them,
// '…' keeps everything literally, "…" keeps blanks and takes \" and \\,
// and a backslash outside quotes takes the next character.
func splitCommand(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("a ' is not closed")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`a " is not closed`)
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("it ends with a lone backslash")
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	if len(out) == 0 {
		return nil, errors.New("it is empty; give the agent's command, e.g. 'claude-agent-acp'")
	}
	return out, nil
}

// acpLauncher is the launcher the doors run agents with: the jail,
// with the session caps. Checking the jail first sweeps what a killed
// agentry left (the agents' cells, their tmpfs and control groups),
// reported to events. Without a jail it refuses, naming bubblewrap and
// --allow-unjailed; with allow it warns loudly and returns the unjailed
// launcher and why.
func acpLauncher(ctx context.Context, command string, caps sessionCaps, allow bool, events func(event.Event), warn io.Writer) (l acp.Launcher, unjailed string, closeFn func(), err error) {
	var c jail.Caps
	for _, x := range []struct {
		flag, v string
		dst     *int64
	}{{"--session-memory", caps.memory, &c.Memory}, {"--session-disk", caps.disk, &c.Disk}} {
		if x.v == "" {
			continue
		}
		n, err := jail.ParseSize(x.v)
		if err != nil {
			return nil, "", nil, usageError("%s: %v", x.flag, err)
		}
		*x.dst = n
	}
	j, err := jail.NewAgent(jail.AgentOptions{Caps: &c, Events: events})
	if err != nil {
		return nil, "", nil, usageError("%v", err)
	}
	jerr := j.Check(ctx)
	if jerr == nil {
		for name, why := range j.Gaps() {
			fmt.Fprintf(warn, "agentry %s: the agent jail cannot apply its %s cap here: %s (every session's jail_started event says so)\n", command, name, why)
		}
		return acp.Jailed(j), "", func() { _ = j.Close() }, nil
	}
	_ = j.Close()
	if !allow {
		return nil, "", nil, usageError("refusing to run the agent UNJAILED: %v; "+
			"install bubblewrap (Debian: apt-get install bubblewrap) and run agentry as root, "+
			"or pass --allow-unjailed to run it as this user with its files, secrets and network", jerr)
	}
	fmt.Fprintf(warn, "agentry %s: WARNING: --allow-unjailed: the agent runs UNJAILED (%v).\n"+
		"agentry %s: WARNING: it runs as this user: it can read and write this user's files, read this process's secrets and reach any address;\n"+
		"agentry %s: WARNING: --agent-allow-host is not enforced. Install bubblewrap (apt-get install bubblewrap) and drop --allow-unjailed to jail it.\n",
		command, jerr, command, command)
	return acp.Unjailed(acp.UnjailedOptions{Stderr: io.Discard}), oneLine(jerr.Error()), func() {}, nil
}

// openACP opens the registry with one ACP instance, id.
func openACP(ctx context.Context, l acp.Launcher, id string, cfg json.RawMessage, events func(event.Event), opts ...provider.Option) (*provider.Registry, *provider.Instance, error) {
	d, err := acp.NewDriver(acp.Options{Launcher: l, Events: events, ClientName: "agentry"})
	if err != nil {
		return nil, nil, err
	}
	reg, err := provider.OpenRegistry(ctx, []provider.Driver{d}, []provider.Definition{{ID: id, Provider: acp.DefaultKey, Config: cfg}}, opts...)
	if err != nil {
		return nil, nil, err
	}
	inst, err := reg.Instance(id)
	if err != nil {
		_ = reg.Dispose(ctx)
		return nil, nil, err
	}
	return reg, inst, nil
}

// workspaces makes the directory that holds every conversation's
// workspace: absolute, traversable by the jail's user (0711: it can reach
// its own workspace, not list the others).
func workspaces(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usageError("--workspaces: %v", err)
	}
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return "", usageError("--workspaces: %v", err)
	}
	if err := os.Chmod(abs, 0o711); err != nil {
		return "", usageError("--workspaces: %v", err)
	}
	return abs, nil
}

// dropConversationDir removes a closed conversation's workspace under
// root (the directory conversationDir made, or the pooled agent's
// workspace it leads to) and its agent's HOME beside it.
func dropConversationDir(root string) func(tool.Identity, string) error {
	return func(owner tool.Identity, sessionID string) error {
		key, ok := toolsession.Key(toolsession.ScopeSession, toolsession.Facts{Tenant: owner.Tenant, Principal: owner.Principal, SessionID: sessionID})
		if !ok {
			return nil
		}
		return acp.RemoveWorkspace(root, filepath.Join(root, toolsession.HashKey(key)))
	}
}

// conversationDir is host.Options.WorkingDirectory for the ACP door: each
// conversation's workspace is root/<digest of its owner and id>, made 0700
// on first use (the jail hands it to the agent's user) and kept across
// evictions and restarts, so a resumed session finds its files; its
// agent's HOME is kept beside it (acp.Config.KeepHome).
func conversationDir(root string) func(tool.Identity, string) (string, error) {
	return func(owner tool.Identity, sessionID string) (string, error) {
		key, ok := toolsession.Key(toolsession.ScopeSession, toolsession.Facts{Tenant: owner.Tenant, Principal: owner.Principal, SessionID: sessionID})
		if !ok {
			return "", errors.New("agentry serve: a conversation without an owner and an id has no workspace")
		}
		dir := filepath.Join(root, toolsession.HashKey(key))
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("agentry serve: making the conversation's workspace: %w", err)
		}
		return dir, nil
	}
}
