// Package sandbox holds the pieces of a jail that do not depend on what
// runs in it, so that every jail agentry builds (the code runners of
// code/local, the jailed coding agents of provider/acp) applies the same
// limits the same way and cleans up after a crash the same way.
//
// Seccomp. [SeccompProgram] is a BPF filter, generated in Go, in the form
// bubblewrap's --seccomp FD reads; [SeccompFile] hands it over as a pipe.
// It allows every system call except those in [Denied] (after Docker's
// default profile: io_uring, the key store, bpf, perf, userfaultfd,
// ptrace and other processes' memory, mounts and namespaces, modules and
// kexec, swap, reboot, the clock), which fail with EPERM; clone3 fails
// with ENOSYS so the C library falls back to clone, whose namespace flags
// the filter refuses; a foreign ABI (i386 on x86_64) kills the process.
//
// Control groups. [OpenCgroups] makes one runner's group below the groups
// this process is in — cgroup v2 where that group can delegate memory,
// pids and cpu, the v1 hierarchies otherwise — and [Cgroups.Gaps] names
// each limit it cannot apply here and why; it never fails silently.
// [Cgroups.Session] makes one session's group with [Limits] on the
// memory, processes and CPU of all its processes together; [Group.Enter]
// moves a process tree in (call it while bubblewrap waits on --block-fd),
// [Group.OOMKills] counts the kernel's kills at the memory cap, and
// [Group.Remove] kills what is left and deletes the group, bounded by a
// context. [Cgroups.Close] removes the runner's group.
//
// Disk. [MountTmpfs] mounts a size-capped tmpfs for a session's writable
// directories (a write past the cap fails with ENOSPC); [CheckTmpfs] says
// whether this process may mount one at all ([ErrNoMount] otherwise).
//
// Crash hygiene. A session directory carries its maker's [Owner] (pid and
// start time, [Claim]); runner groups carry it in their names.
// [SweepDirs] and [SweepCgroups] remove what processes that no longer
// exist left behind — unmounting a leftover tmpfs, killing leftover
// processes — and never touch what a live process owns. Each returns a
// [Swept] for the caller to report as an event.
//
// The system. [SystemMounts] is the part of bubblewrap's command line
// that shows /usr, the [SystemDirs] and the [EtcFiles] read-only, the
// same in every jail. [WaitExit] waits for a process without reaping it,
// so its process group can be killed after it exits with no risk of the
// id having been reused.
//
// Sizes for flags and settings are read by [ParseSize] ("1GiB",
// "512MiB") and written by [FormatSize].
//
// Everything here needs Linux.
package sandbox
