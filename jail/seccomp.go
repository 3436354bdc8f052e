//go:build linux

package jail

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// denied lists the system calls the filter answers with EPERM, after
// Docker's default profile: what reaches the kernel's key store, its BPF
// and perf machinery, io_uring, other processes' memory, mounts and
// namespaces, modules, the clock, swap and the power switch. Names this
// architecture does not have are left out of its filter.
var denied = []string{
	// io_uring: a second system-call interface, outside any filter.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// The kernel's key retention service.
	"keyctl", "add_key", "request_key",
	// BPF, perf and userfaultfd: common kernel exploit primitives.
	"bpf", "perf_event_open", "userfaultfd",
	// Other processes.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// Mounts and namespaces, including the new mount API.
	"mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"name_to_handle_at", "open_by_handle_at",
	// Kernel modules and replacement kernels.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "query_module", "get_kernel_syms",
	// The machine itself.
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup",
	"settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex",
	"ioperm", "iopl", "fanotify_init", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
	"vm86", "vm86old",
	// NUMA policy (Docker allows these only with CAP_SYS_NICE).
	"get_mempolicy", "set_mempolicy", "mbind", "move_pages",
}

// cloneNamespaces are the clone(2) flags that make namespaces; clone with
// any of them is denied like unshare. clone3 passes its flags in memory a
// filter cannot read, so it answers ENOSYS and the C library falls back to
// clone, which the filter can judge.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// seccompProgram is the filter as bubblewrap's --seccomp reads it: an
// array of struct sock_filter in this machine's byte order. Every other
// system call is allowed; a system call made through another
// architecture's ABI (i386's int 0x80 on x86_64, where a deny list would
// not apply) kills the process.
func seccompProgram() ([]byte, error) { return program() }

var program = sync.OnceValues(func() ([]byte, error) {
	raw, err := assemble(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
})

func assemble(goarch string) ([]bpf.RawInstruction, error) {
	info, err := arch.GetInfo(goarch)
	if err != nil {
		return nil, fmt.Errorf("jail: no seccomp filter for %s: %w", goarch, err)
	}
	var names []string
	for _, n := range denied {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	groups := []seccomp.SyscallGroup{{Names: names, Action: seccomp.ActionErrno}}
	if _, ok := info.SyscallNames["clone3"]; ok {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)})
	}
	if _, ok := info.SyscallNames["clone"]; ok && (goarch == "amd64" || goarch == "arm64") {
		// The flags are clone's first argument on these architectures.
		groups = append(groups, seccomp.SyscallGroup{
			NamesWithCondtions: []seccomp.NameWithConditions{{Name: "clone", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaces},
			}}},
			Action: seccomp.ActionErrno,
		})
	}
	p := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	body, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("jail: assembling the seccomp filter: %w", err)
	}
	// The library's program allows whatever comes through a foreign ABI;
	// ours refuses it before the library's program runs.
	prologue := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}
	raw, err := bpf.Assemble(append(prologue, body...))
	if err != nil {
		return nil, fmt.Errorf("jail: assembling the seccomp filter: %w", err)
	}
	return raw, nil
}

// seccompFile returns the read end of a pipe that holds the filter, for
// bubblewrap's --seccomp FD. The caller hands it to the child and closes
// it.
func seccompFile() (*os.File, error) {
	prog, err := program()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("jail: a pipe for the seccomp filter: %w", err)
	}
	// A few hundred bytes: far less than a pipe holds, so the write
	// cannot wait for the reader.
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("jail: writing the seccomp filter: %w", err)
	}
	return r, nil
}
