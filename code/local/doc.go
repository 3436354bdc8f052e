// Package local runs model-written code on this machine, at three named
// strengths of isolation.
//
//  1. [New]: a process per call. Each Execute is its own process with no
//     stdin, an environment that holds only PATH plus what the operator
//     passes (a secret in the host's environment never reaches the code),
//     a timeout (default 30s) that kills the whole process group, and a
//     stated cut of each output stream (default 8,000 characters). Only
//     files persist between calls. It is NOT a sandbox: the code runs as
//     this process's user and can read, write and connect to whatever that
//     user can.
//  2. [NewInterpreter]: one long-lived Python interpreter per session (the
//     driver is embedded in this package), so variables, imports and files
//     persist between executes. Same allowlist, cuts and timeouts; an
//     interpreter that times out or crashes marks its session broken, and
//     the next Execute says so rather than quietly starting afresh. The
//     code's output travels on per-execution pipes, never on the control
//     channel, so nothing it prints can forge a frame. Also NOT a sandbox.
//  3. Jailed ([Options.Jail]): either of the above inside bubblewrap,
//     through the code profile of package jail, whose package comment is
//     the one statement of what jailed code can do: its own mount
//     namespace with the system read-only and only the session's private
//     /work and /tmp writable, no network, its own PID namespace, an
//     unprivileged user, rlimits and session caps, a seccomp filter, and
//     death with its parent. Where bwrap is missing or cannot build a
//     jail, Start refuses with an error naming the fix; it never runs the
//     code unjailed.
//
// In-process evaluation (an interpreter embedded in the host's address
// space) is refused outright: it shares the host's memory, credentials and
// file descriptors, so it is not a boundary at all.
//
// Sessions stage inputs ([code.Stager]) as files under the work directory
// and publish them in AGENTRY_INPUTS. Every session's directory is removed
// when it stops. The package needs Linux.
package local
