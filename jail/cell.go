package jail

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/internal/undo"
)

// cellPrefix starts the name of every cell's directory; a sweep looks for
// it. The code profile names its cells agentry-<key hash>-…,
// agentry-pool-… and agentry-jail-probe-…, the agent profile
// agentry-agent-<label>-….
const cellPrefix = "agentry-"

// A Cell is one jailed process tree's private place on the host: a
// directory marked with its maker ([Claim]), so that a later agentry
// process sweeps it once the maker is dead; below it, when a disk cap
// applies, a size-capped tmpfs holding the directories the jail binds
// writable; and, when caps apply, a control group over all its processes.
// The code profile makes one per session ("work" and "tmp", bound at /work
// and /tmp), the agent profile one per agent ("home", "tmp" and "etc").
// An unjailed code runner's cells are plain marked directories.
//
// A Cell is not safe for concurrent use: its session owns it.
type Cell struct {
	root  string
	fs    string            // the tmpfs mount point below root; "" without a disk cap
	dirs  map[string]string // name → host path
	binds [][2]string       // host path → where the jail shows it, writable
	group *cgroup           // nil: no caps
}

// cellSpec is what openCell makes.
type cellSpec struct {
	parent, prefix string // the directory is made in parent, named prefix + random
	disk           int64  // > 0: a tmpfs of this size holds the named directories
	diskUID        int    // the tmpfs's owner
	diskGID        int
	dirs           []string          // the named directories, made 0700
	binds          map[string]string // name → where the jail shows it
	cg             *cgroups          // nil or version 0: no group
	limits         cellLimits
}

// openCell makes a cell. What it made is removed again when a step fails.
func openCell(s cellSpec) (c *Cell, err error) {
	var stack undo.Stack
	defer stack.OnError(&err)
	if err := os.MkdirAll(s.parent, 0o755); err != nil {
		return nil, fmt.Errorf("jail: making %s to hold session directories: %w; name a writable directory", s.parent, err)
	}
	root, err := os.MkdirTemp(s.parent, s.prefix)
	if err != nil {
		return nil, fmt.Errorf("jail: making a session directory in %s: %w; name a writable directory", s.parent, err)
	}
	c = &Cell{root: root, dirs: map[string]string{}}
	stack.Push(func() error { return removeAll(root) })
	if err := Claim(root); err != nil {
		return nil, err
	}
	base := root
	if s.disk > 0 {
		fs := filepath.Join(root, "fs")
		if err := os.Mkdir(fs, 0o700); err != nil {
			return nil, fmt.Errorf("jail: making the session directory: %w", err)
		}
		if err := mountTmpfs(fs, s.disk, s.diskUID, s.diskGID); err != nil {
			return nil, fmt.Errorf("jail: the session's disk cap: %w", err)
		}
		c.fs, base = fs, fs
		stack.Push(func() error { return unmount(fs) })
	}
	for _, name := range s.dirs {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, fmt.Errorf("jail: making the session directory: %w", err)
		}
		c.dirs[name] = p
		if at, ok := s.binds[name]; ok {
			c.binds = append(c.binds, [2]string{p, at})
		}
	}
	if s.cg != nil && s.cg.Version() != 0 {
		g, err := s.cg.Session(s.limits)
		if err != nil {
			return nil, fmt.Errorf("jail: making the session's control group: %w", err)
		}
		c.group = g
	}
	stack.Keep()
	return c, nil
}

// Root is the cell's directory on the host. Files the jail's processes
// must not see (an interpreter's log) can live here: the jail binds only
// the named directories.
func (c *Cell) Root() string { return c.root }

// Dir is the host path of the cell's named directory ("work", "tmp", …),
// or "" when the cell has none of that name.
func (c *Cell) Dir(name string) string { return c.dirs[name] }

// View maps a host path inside one of the cell's bound directories to the
// path its jailed processes see ("/work/out.csv"); any other path, and
// every path of an unjailed cell, is returned as it is.
func (c *Cell) View(host string) string {
	for _, b := range c.binds {
		rel, err := filepath.Rel(b[0], host)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(b[1], rel)
		}
	}
	return host
}

// OOMKills is how many of the cell's processes the kernel has killed at
// its memory cap (0 without caps).
func (c *Cell) OOMKills() int { return c.group.OOMKills() }

// Usage is the CPU time the cell's processes have spent and the most
// memory they held at once, from its control group (0 without one).
func (c *Cell) Usage() (cpu time.Duration, peakMemory int64) { return c.group.Usage() }

// Rename moves the cell's directory to root (in the same file system):
// a pooled interpreter's cell, renamed after the session that takes it.
func (c *Cell) Rename(root string) error {
	if err := os.Rename(c.root, root); err != nil {
		return fmt.Errorf("jail: renaming the session directory: %w", err)
	}
	move := func(p string) string {
		if p == "" {
			return ""
		}
		return root + strings.TrimPrefix(p, c.root)
	}
	for name, p := range c.dirs {
		c.dirs[name] = move(p)
	}
	for i := range c.binds {
		c.binds[i][0] = move(c.binds[i][0])
	}
	c.fs = move(c.fs)
	c.root = root
	return nil
}

// giveTo hands the cell's directories, and everything in them, to uid:gid
// (the jail's user): its root, so that bubblewrap running as that user
// can reach the named directories, and each named tree. The owner's mark
// stays root's.
func (c *Cell) giveTo(uid, gid int) error {
	for _, p := range []string{c.root, c.fs} {
		if p == "" {
			continue
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("jail: giving the session directory to the jail's user %d: %w", uid, err)
		}
	}
	for _, p := range c.dirs {
		if err := chownTree(p, uid, gid); err != nil {
			return fmt.Errorf("jail: giving the session directory to the jail's user %d: %w", uid, err)
		}
	}
	return nil
}

// Remove kills what is left in the cell's control group and deletes the
// group (bounded by ctx), unmounts its tmpfs and deletes its directory.
// It is safe to call more than once.
func (c *Cell) Remove(ctx context.Context) error {
	if c == nil {
		return nil
	}
	groupErr := c.group.Remove(ctx)
	if c.fs != "" {
		// Deleting through a mount that is still there would only empty
		// it; the next sweep unmounts and deletes the whole directory.
		if err := unmount(c.fs); err != nil {
			return errors.Join(groupErr, fmt.Errorf("jail: removing the session directory: %w", err))
		}
	}
	if err := removeAll(c.root); err != nil {
		return errors.Join(groupErr, fmt.Errorf("jail: removing the session directory: %w", err))
	}
	return groupErr
}

// chownTree hands every entry under root (symlinks themselves, never their
// targets) to uid:gid.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
