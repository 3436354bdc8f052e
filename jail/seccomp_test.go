//go:build linux

package jail

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// run evaluates the filter on one system call, as the kernel would, with
// x/net/bpf's interpreter. That interpreter loads words big-endian, so the
// seccomp_data built here is too; the offsets are the kernel's.
func run(t *testing.T, vm *bpf.VM, auditArch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], auditArch)
	for i, a := range args {
		off := 16 + 8*i
		// LdLo reads the low word at the argument's offset (little-endian
		// layout), LdHi the one after it.
		binary.BigEndian.PutUint32(data[off:], uint32(a))
		binary.BigEndian.PutUint32(data[off+4:], uint32(a>>32))
	}
	out, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(out)
}

func TestSeccompDecisions(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the decision table is written for x86_64")
	}
	raw, err := assemble("amd64")
	if err != nil {
		t.Fatal(err)
	}
	var prog []bpf.Instruction
	for _, r := range raw {
		prog = append(prog, r.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	native := uint32(arch.X86_64.ID)
	nr := func(name string) uint32 { return uint32(arch.X86_64.SyscallNames[name]) }
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		kill   = unix.SECCOMP_RET_KILL_PROCESS
	)
	for _, tc := range []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"io_uring_setup is syscall 425", native, 425, nil, eperm},
		{"io_uring_enter", native, nr("io_uring_enter"), nil, eperm},
		{"keyctl", native, nr("keyctl"), nil, eperm},
		{"add_key", native, nr("add_key"), nil, eperm},
		{"bpf", native, nr("bpf"), nil, eperm},
		{"perf_event_open", native, nr("perf_event_open"), nil, eperm},
		{"userfaultfd", native, nr("userfaultfd"), nil, eperm},
		{"ptrace", native, nr("ptrace"), nil, eperm},
		{"mount", native, nr("mount"), nil, eperm},
		{"umount2", native, nr("umount2"), nil, eperm},
		{"fsopen", native, nr("fsopen"), nil, eperm},
		{"kexec_load", native, nr("kexec_load"), nil, eperm},
		{"finit_module", native, nr("finit_module"), nil, eperm},
		{"swapon", native, nr("swapon"), nil, eperm},
		{"reboot", native, nr("reboot"), nil, eperm},
		{"unshare", native, nr("unshare"), nil, eperm},
		{"setns", native, nr("setns"), nil, eperm},
		{"pivot_root", native, nr("pivot_root"), nil, eperm},
		{"clone3 falls back", native, nr("clone3"), nil, enosys},
		{"clone of a thread", native, nr("clone"), []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, allow},
		{"fork via clone", native, nr("clone"), []uint64{17}, allow},
		{"clone into a user namespace", native, nr("clone"), []uint64{unix.CLONE_NEWUSER | 17}, eperm},
		{"clone into a network namespace", native, nr("clone"), []uint64{unix.CLONE_NEWNET}, eperm},
		{"read", native, nr("read"), nil, allow},
		{"openat", native, nr("openat"), nil, allow},
		{"execve", native, nr("execve"), nil, allow},
		{"prlimit64", native, nr("prlimit64"), nil, allow},
		{"x32 ABI", native, 0x40000000 | 321, nil, enosys},
		{"i386 ABI", uint32(arch.I386.ID), 1, nil, kill},
	} {
		if got := run(t, vm, tc.arch, tc.nr, tc.args...); got != tc.want {
			t.Errorf("%s: got %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

func TestSeccompProgramBytes(t *testing.T) {
	b, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || len(b)%8 != 0 || len(b) > 4096*8 {
		t.Fatalf("a program of %d bytes is not a sock_filter array the kernel takes", len(b))
	}
	f, err := seccompFile()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(b)+1)
	n, _ := f.Read(got)
	if n != len(b) {
		t.Fatalf("the pipe holds %d bytes, want %d", n, len(b))
	}
}
