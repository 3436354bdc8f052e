//go:build linux

package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Owner names a process for as long as it lives: its pid and its start
// time (clock ticks after boot), so that a pid the kernel has handed to a
// new process since does not pass for the old one.
type Owner struct {
	Pid   int
	Start uint64
}

// Self is this process.
var Self = sync.OnceValue(func() Owner {
	start, err := startTime(os.Getpid())
	if err != nil {
		// /proc is missing: every owner then looks dead to this process
		// except itself (same pid, start 0), which keeps Alive safe.
		start = 0
	}
	return Owner{Pid: os.Getpid(), Start: start}
})

// String is "pid-start", the form names and markers carry.
func (o Owner) String() string { return strconv.Itoa(o.Pid) + "-" + strconv.FormatUint(o.Start, 10) }

// ParseOwner reads what String wrote.
func ParseOwner(s string) (Owner, error) {
	p, st, ok := strings.Cut(strings.TrimSpace(s), "-")
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(st, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 || strconv.Itoa(pid) != p || strconv.FormatUint(start, 10) != st {
		return Owner{}, fmt.Errorf("jail: %q does not name an owner (pid-start)", s)
	}
	return Owner{Pid: pid, Start: start}, nil
}

// Alive reports whether the owner still runs. A process that cannot be
// seen is dead; one whose pid now belongs to a later process is dead too.
func (o Owner) Alive() bool {
	if o == Self() {
		return true
	}
	start, err := startTime(o.Pid)
	if err != nil {
		return false
	}
	return start == o.Start
}

func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStartTime(string(b))
}

// parseStartTime reads field 22 of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may hold spaces and parentheses itself,
// so fields are counted from the last ')'.
func parseStartTime(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("jail: a /proc stat line without a command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return 0, errors.New("jail: a /proc stat line too short to hold the start time")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// OwnerFile is the marker a session directory carries: the Owner that
// made it.
const OwnerFile = ".agentry-owner"

// Claim marks dir as this process's: a sweep by any other agentry process
// leaves it alone while this one lives.
func Claim(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, OwnerFile), []byte(Self().String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("jail: marking the session directory as this process's: %w", err)
	}
	return nil
}

// ReadOwner reads dir's marker.
func ReadOwner(dir string) (Owner, error) {
	b, err := os.ReadFile(filepath.Join(dir, OwnerFile))
	if err != nil {
		return Owner{}, err
	}
	return ParseOwner(string(b))
}

// swept is what a sweep removed.
type swept struct {
	Paths  []string // what was removed
	Owners []Owner  // the dead processes that had left them, each once
	Failed []error  // what could not be removed, one error each
}

func (s *swept) add(path string, o Owner) {
	s.Paths = append(s.Paths, path)
	for _, x := range s.Owners {
		if x == o {
			return
		}
	}
	s.Owners = append(s.Owners, o)
}

// sweepDirs removes the directories directly under base whose names start
// with prefix and whose marker ([Claim]) names a process that no longer
// exists: what an agentry process killed before it could clean up left
// behind. A directory without a marker, or with a live owner, is never
// touched. Mounts inside a swept directory (a session's tmpfs) are
// detached first.
func sweepDirs(base, prefix string) swept {
	var out swept
	ents, err := os.ReadDir(base)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			out.Failed = append(out.Failed, fmt.Errorf("jail: reading %s to sweep it: %w", base, err))
		}
		return out
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		o, err := ReadOwner(dir)
		if err != nil || o.Alive() {
			continue
		}
		if err := unmountUnder(dir); err != nil {
			out.Failed = append(out.Failed, err)
			continue
		}
		if err := removeAll(dir); err != nil {
			out.Failed = append(out.Failed, err)
			continue
		}
		out.add(dir, o)
	}
	return out
}

// removeAll deletes dir and everything in it. Code may have taken the
// permissions off its own directories; those are restored first, through
// an os.Root so that no symlink the code planted can turn a chmod onto a
// file outside dir.
func removeAll(dir string) error {
	if dir == "" {
		return nil
	}
	err := os.RemoveAll(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if r, rerr := os.OpenRoot(dir); rerr == nil {
		_ = fs.WalkDir(r.FS(), ".", func(p string, e fs.DirEntry, werr error) error {
			if e != nil && e.IsDir() {
				_ = r.Chmod(p, 0o700)
			}
			return nil
		})
		r.Close()
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("jail: removing %s: %w", dir, err)
	}
	return nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("jail: unmounting %s: %w", m, err)
		}
	}
	return nil
}

func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("jail: reading the mount table: %w", err)
	}
	var out []string
	for _, m := range parseMountPoints(string(b)) {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// parseMountPoints reads the mount points (field 5) of /proc/self/mountinfo,
// undoing the octal escapes the kernel writes for spaces and the like.
func parseMountPoints(info string) []string {
	var out []string
	for _, line := range strings.Split(info, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		out = append(out, unescapeMount(f[4]))
	}
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// fileOwner is a file's uid and gid.
func fileOwner(fi fs.FileInfo) (int, int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
