package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider/acp"
)

// credFlags are serve's flags for people's credentials: the key they are
// sealed with, and which of them the agent gets as which variable.
type credFlags struct {
	keyFile string
	agent   []string
}

func (c *credFlags) add(f *pflag.FlagSet) {
	f.StringVar(&c.keyFile, "credentials-key-file", "", "keep people's credentials (PUT /v1/credentials/{name}), sealed with the first key of this file (lines \"ID KEY\", KEY: head -c 32 /dev/urandom | base64; later lines are old keys, read only); readable by serve's user alone")
	f.StringArrayVar(&c.agent, "agent-credential", nil, "with --agent acp and --credentials-key-file: VAR=NAME[:AUTH], the person's credential NAME reaches their agent as the variable VAR (feeding its authentication method AUTH); a conversation opens only once the person stored it (repeat)")
}

// parse reads --agent-credential: the adapter's credentials and the
// host's.
func (c credFlags) parse() ([]acp.Credential, []host.AgentCredential, error) {
	if len(c.agent) > 0 && c.keyFile == "" {
		return nil, nil, usageError("--agent-credential needs --credentials-key-file: people's credentials are kept sealed, never in clear")
	}
	var ac []acp.Credential
	var hc []host.AgentCredential
	for _, v := range c.agent {
		name, val, ok := strings.Cut(v, "=")
		if !ok {
			return nil, nil, usageError("--agent-credential %q: write VAR=NAME, e.g. OPENAI_API_KEY=openai (or OPENAI_API_KEY=openai:api-key to name the authentication method it feeds)", v)
		}
		cred, auth, _ := strings.Cut(val, ":")
		ac = append(ac, acp.Credential{Var: name, Name: cred, AuthMethod: auth})
		hc = append(hc, host.AgentCredential{Name: cred, Var: name})
	}
	if err := host.CheckAgentCredentials(hc); err != nil {
		return nil, nil, usageError("--agent-credential: %s", strings.TrimPrefix(err.Error(), "host: "))
	}
	return ac, hc, nil
}

// keyring reads --credentials-key-file, refusing a file other users may
// read or write: it holds the keys to everyone's credentials.
func (c credFlags) keyring() (*host.Keyring, error) {
	if c.keyFile == "" {
		return nil, nil
	}
	fi, err := os.Stat(c.keyFile)
	if err != nil {
		return nil, usageError("--credentials-key-file: %v", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, usageError("--credentials-key-file %s may be read by other users (mode %04o); run chmod 600 %s", c.keyFile, fi.Mode().Perm(), c.keyFile)
	}
	if fi.Size() > 64<<10 {
		return nil, usageError("--credentials-key-file %s is larger than 64 KiB; it holds one key a line", c.keyFile)
	}
	b, err := os.ReadFile(c.keyFile)
	if err != nil {
		return nil, usageError("--credentials-key-file: %v", err)
	}
	k, err := host.ParseKeyring(b)
	if err != nil {
		return nil, usageError("--credentials-key-file %s: %s", c.keyFile, strings.TrimPrefix(err.Error(), "host: "))
	}
	return k, nil
}

// describeCredentials says what serve does with credentials, for its
// banner.
func describeCredentials(k *host.Keyring, agent []host.AgentCredential) string {
	if k == nil {
		return ""
	}
	s := fmt.Sprintf("people's credentials kept sealed (key %s)", k.Current())
	if len(agent) > 0 {
		names := make([]string, len(agent))
		for i, a := range agent {
			names[i] = a.Name + " as " + a.Var
		}
		s += "; each agent gets its person's " + strings.Join(names, ", ")
	}
	return s
}

// profileCredentials is an agent profile's credentials = {VAR = "name"}
// as the adapter's credentials and the host's, by variable.
func profileCredentials(m map[string]string) ([]acp.Credential, []host.AgentCredential) {
	var ac []acp.Credential
	var hc []host.AgentCredential
	for _, v := range slices.Sorted(maps.Keys(m)) {
		ac = append(ac, acp.Credential{Var: v, Name: m[v]})
		hc = append(hc, host.AgentCredential{Name: m[v], Var: v})
	}
	return ac, hc
}

// checkProfileCredentials refuses what agent profiles' credentials cannot
// run with: --agent-credential beside profiles (each profile says its
// own), and credentials without --credentials-key-file.
func (o *serveOptions) checkProfileCredentials() error {
	if len(o.creds.agent) > 0 {
		return usageError("--agent-credential with agent profiles ([agents.NAME]): give each profile its own, credentials = { VAR = \"name\" }; drop --agent-credential")
	}
	for _, p := range o.profiles {
		if len(p.credentials) > 0 && o.creds.keyFile == "" {
			return usageError("agents.%s.credentials need --credentials-key-file (credentials-key-file in the configuration file): people's credentials are kept sealed, never in clear", p.name)
		}
	}
	return nil
}
