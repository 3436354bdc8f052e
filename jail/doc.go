// Package jail is the one place agentry confines a process: it alone
// writes bubblewrap's command line and starts bubblewrap, makes the
// session directories, applies the seccomp filter, the control groups and
// the size-capped tmpfs, and sweeps what a crashed agentry process left.
// Read this comment to know what a jailed process can do.
//
// There are two profiles, for the two kinds of process agentry jails.
//
// # Model-written code: Code, used by code/local
//
// One cell per session ([Code.Open]); every execute (or the session's
// one interpreter) runs in it through [Code.Command]:
//
//   - Files: the system read-only (/usr, /bin, /lib…, a few files of /etc:
//     the loader's cache, TLS roots, time zones, the interpreters'
//     configuration; nothing that names the host's users), plus
//     CodeOptions.ReadOnly. Writable: only the cell's /work (the working
//     directory) and /tmp. No other path of the host exists inside.
//   - User: as root, agentry runs the jail as CodeOptions.UID (default
//     65534) with no supplementary groups; otherwise as its own user.
//     No user namespaces of its own (--disable-userns, bubblewrap ≥ 0.8).
//   - Network: none. Its own network namespace holds only a loopback.
//   - Processes: its own PID, IPC, UTS and cgroup namespaces and /proc;
//     hostname "sandbox". rlimits per process: address space (2 GiB),
//     processes (64), CPU time (10m), file size (1 GiB), open files
//     (1024), no core dumps.
//   - The session's caps, all its processes together: memory (1 GiB, plus
//     what /work and /tmp hold), processes (256) and CPU (1 core) in a
//     control group of its own, and a disk cap (1 GiB) — /work and /tmp are
//     one tmpfs, and a write past it fails with ENOSPC. The code is held
//     back (--block-fd) until it is inside its group.
//   - System calls: the seccomp filter refuses (EPERM) io_uring, the key
//     store, bpf, perf, userfaultfd, ptrace and other processes' memory,
//     mounts and namespaces, modules and kexec, swap, reboot and the clock;
//     clone3 answers ENOSYS so the C library falls back to clone, whose
//     namespace flags are refused; a foreign ABI (i386 on x86_64) kills the
//     process.
//   - Lifetime: the jail dies with agentry (--die-with-parent and a
//     parent-death signal); an execute that ends kills what it left in its
//     process group.
//
// What this machine cannot cap (no delegated cgroup, no CAP_SYS_ADMIN for
// the tmpfs) is a stated gap ([Code.Gaps], [Code.Describe]), never a
// silent omission; what it cannot jail at all (no bubblewrap, no user
// namespaces) is refused with [ErrNoJail] and the fix.
//
// # A coding agent: Agent, used by provider/acp
//
// One cell per agent, which also holds its terminals ([Process.Command]):
//
//   - Files: the same system view read-only, plus the agent's install
//     directory (from the resolved Spec.Argv[0], its #! interpreter and
//     each script an argument names by absolute path, as in node
//     /opt/agent/dist/index.js: the tree up to node_modules for an npm
//     package) and
//     AgentOptions.ReadOnly. Writable: the workspace (bound at its host
//     path, the working directory, handed to the agent's user), a HOME at
//     /home/agent (a private fresh copy of Spec.Home, or the kept
//     Spec.HomeDir, made from Spec.Home once) and a private /tmp.
//     The jail writes its own passwd, group, hosts and nsswitch.conf.
//   - User: host uid AgentOptions.UID (default 65534), uid 1000 "agent"
//     as it sees itself, with no user namespaces of its own; agentry must
//     be root to launch it.
//   - Environment: exactly Spec.Env, plus HOME, PATH (when Spec.Env has
//     none), the proxy variables and PWD.
//   - Network: its own namespace, reaching only Spec.AllowHosts. agentry
//     places forwarders inside on loopback (127.0.0.1:PORT for the host's
//     own port; a loopback address in the jail's /etc/hosts for a host
//     name; the address itself, added to the jail's loopback, for an IPv4
//     address), an egress proxy (HTTP CONNECT and plain HTTP) named by
//     HTTPS_PROXY and HTTP_PROXY, and a listener per Spec.Expose entry at
//     Process.Addr(name). Anything else fails; each refusal the jail can
//     see is an agentry.jail.connection_refused event ([Refused]).
//   - Processes: its own PID, IPC, UTS and cgroup namespaces; rlimits on
//     processes (512, threads count), open files (4096) and file size
//     (1 GiB), no core dumps.
//   - With AgentOptions.Caps: the same seccomp filter (the agent and each
//     terminal), memory, process and CPU caps in a control group the
//     terminals join, and a disk cap on HOME and /tmp. Without Caps, or
//     where this machine cannot apply one, every agentry.jail.started
//     event ([Started]) names what is not applied.
//   - Lifetime: Stop sends SIGTERM to every process in the jail's network
//     namespace, then SIGKILL when its context ends; agentry dying kills
//     the jail.
//
// # Crash hygiene
//
// A cell's directory carries its maker's [Owner] (pid and start time,
// [Claim]); control groups carry it in their names. When agentry is
// killed before it can clean up, its next start sweeps what it left: a
// code runner at its first session ([Code.Sweep]), the agent profile at
// its first Check or Launch. A sweep unmounts a leftover tmpfs, kills and
// removes a leftover control group, deletes the directory, and never
// touches what a live process owns; each is an agentry.runner.swept event
// ([RunnerSwept]). A graceful shutdown leaves nothing to sweep.
//
// The jail's event types ([TypeStarted], [TypeRefused], [TypeStopped],
// [TypeRunnerLimits], [TypeRunnerSwept]) are registered with package
// event, so event files decode them.
//
// Everything but the event types and sizes ([ParseSize]) needs Linux.
package jail
