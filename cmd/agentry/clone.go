package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/jail"
)

// maxClones bounds the clones running at once.
const maxClones = 4

// gitCloner is serve's host.Cloner: git run in the agent jail, its
// network reaching the repository's host:port alone, from the hosts
// --clone-allow names.
type gitCloner struct {
	jail  *jail.Agent
	allow map[string]bool // host:port
	slots chan struct{}
}

// newGitCloner reads --clone-allow: HOST (port 443, or 80 for an http://
// URL) or HOST:PORT.
func newGitCloner(j *jail.Agent, allow []string) (*gitCloner, error) {
	g := &gitCloner{jail: j, allow: map[string]bool{}, slots: make(chan struct{}, maxClones)}
	for _, a := range allow {
		if a == "" || strings.ContainsAny(a, "/@ ") {
			return nil, usageError("--clone-allow %q: name a host, or host:port (e.g. github.com, or git.internal:8443)", a)
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			g.allow[a+":443"], g.allow[a+":80"] = true, true
			continue
		}
		g.allow[a] = true
	}
	return g, nil
}

// target is the host:port a clone URL reaches.
func target(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Opaque != "" {
		return "", errors.New("a clone URL is https://HOST/PATH (or http://), without a user or password")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

func (g *gitCloner) Check(raw string) error {
	hp, err := target(raw)
	if err != nil {
		return err
	}
	if !g.allow[hp] {
		return fmt.Errorf("this host clones only from the hosts its operator allows (--clone-allow); %s is not one", hp)
	}
	return nil
}

// credentialHelper answers git's request for a password from the
// environment: the secret is in no argument and no URL.
const credentialHelper = `!f() { test "$1" = get || exit 0; echo username=agentry; echo "password=$AGENTRY_CLONE_PASSWORD"; }; f`

// Clone runs git clone into job.Dir, jailed, bounded by ctx.
func (g *gitCloner) Clone(ctx context.Context, job host.CloneJob) error {
	hp, err := target(job.URL)
	if err != nil || !g.allow[hp] {
		return errors.New("the URL is not allowed")
	}
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	case <-ctx.Done():
		return errors.New("too many clones are running; try again")
	}
	argv := []string{"git", "-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.http.allow=always",
		"-c", "credential.helper=", "-c", "credential.helper=" + credentialHelper, "-c", "core.askPass=", "clone", "--no-recurse-submodules"}
	if job.Ref != "" {
		argv = append(argv, "--branch", job.Ref)
	}
	argv = append(argv, "--", job.URL, ".")
	env := []string{"PATH=" + jail.DefaultPath, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
	if job.Secret != "" {
		env = append(env, "AGENTRY_CLONE_PASSWORD="+job.Secret)
	}
	p, err := g.jail.Launch(ctx, jail.Spec{Argv: argv, Env: env, Workspace: job.Dir, AllowHosts: []string{hp}, Label: job.Label})
	if err != nil {
		return fmt.Errorf("starting git in the jail: %w", err)
	}
	_ = p.Stdin().Close()
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()); _ = p.Stdout().Close() }()
	select {
	case <-p.Done():
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.Stop(sctx)
		cancel()
		return errors.New("the clone took longer than its bound")
	}
	if err := p.Err(); err != nil {
		return fmt.Errorf("git: %s", lastLine(p.StderrTail(), job.Secret))
	}
	return nil
}

// lastLine is git's last words, without the secret should git ever
// repeat it.
func lastLine(tail, secret string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if secret != "" {
		l = strings.ReplaceAll(l, secret, "[credential]")
	}
	if len(l) > 300 {
		l = l[:300]
	}
	return l
}

// withCloner gives serve its cloner when --clone-allow names hosts: git in
// a jail of its own. It refuses when the agents run unjailed (why says
// why): a clone is never run unconfined.
func withCloner(ctx context.Context, o serveOptions, d *serveDeps, why string, events func(event.Event)) (func(), error) {
	if len(o.cloneAllow) == 0 {
		return func() {}, nil
	}
	if why != "" {
		return nil, usageError("--clone-allow needs the jail: clones run jailed, and this machine cannot jail (%s)", why)
	}
	j, err := jail.NewAgent(jail.AgentOptions{Events: events})
	if err != nil {
		return nil, usageError("%v", err)
	}
	if err := j.Check(ctx); err != nil {
		_ = j.Close()
		return nil, usageError("--clone-allow needs the jail: %v", err)
	}
	g, err := newGitCloner(j, o.cloneAllow)
	if err != nil {
		_ = j.Close()
		return nil, err
	}
	d.cloner = g
	return func() { _ = j.Close() }, nil
}
