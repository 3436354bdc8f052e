// Package jail runs a coding agent (an ACP agent process) under
// bubblewrap, one jail per session, with a network that reaches only an
// allowlist.
//
// What a jailed agent gets:
//
//   - An unprivileged user (host uid Options.UID, default 65534; uid 1000,
//     "agent", inside). agentry must run as root to launch it: root places
//     the network forwarders in the agent's namespace and hands the
//     writable directories to the agent's user.
//   - Three writable places: the workspace (bound at its host path, which
//     is the agent's working directory), a private HOME (/home/agent, a
//     fresh directory per launch seeded by copying Spec.Home) and a private
//     /tmp. Everything else is read-only: the system (/usr, /bin, /lib…, a
//     few files of /etc), the agent's install directory (derived from the
//     resolved Argv[0] and its #! interpreter) and Options.ReadOnly.
//     Nothing else of the host is mounted: no other session's directories,
//     no tokens file, store or events file. /proc is the jail's own.
//   - Exactly the environment in Spec.Env, plus HOME, PATH (when Spec.Env
//     has none), the proxy variables, and PWD (bubblewrap sets it).
//   - Its own network namespace. Inside it, on loopback, the jail places:
//     a forwarder for each allowed host:port at the address the agent
//     dials (127.0.0.1:PORT for the host's own 127.0.0.1:PORT; a loopback
//     address written into the jail's /etc/hosts for a host name; the
//     address itself, added to the jail's loopback, for an IPv4 address);
//     an egress proxy (HTTP CONNECT and plain HTTP, allowlisted) named by
//     HTTPS_PROXY and HTTP_PROXY; and one listener per Spec.Expose entry
//     at Process.Addr(name). Anything else fails: other loopback ports
//     are closed, and no route leads out. Each refusal the jail can see
//     (a proxy request off the list, a TCP dial on the jail's loopback to
//     a port nothing listens on) is an agentry.jail.connection_refused
//     event.
//   - Bounds: per-process rlimits (processes, open files, file size, no
//     core dumps), and the whole jail — agent, children and Commands — is
//     killed at Stop (SIGTERM, then SIGKILL when Stop's context ends) or
//     when agentry dies (--die-with-parent, Pdeathsig).
//
// Not applied yet, and said so in the agentry.jail.started event of each
// launch: a seccomp filter, per-session cgroup caps on memory, processes
// and CPU, and a size cap on the writable directories. They arrive
// through Options.Confiner (internal/sandbox provides one); whatever the
// Confiner applies leaves the not-applied list.
//
// Without bubblewrap, Launch refuses and names the Debian package
// bubblewrap; it never runs an agent unjailed.
package jail
