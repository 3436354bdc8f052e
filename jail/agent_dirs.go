package jail

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// writeEtc writes the jail's own passwd, group, hosts and nsswitch.conf
// into dir: the agent's user, and the names of the allowed hosts. It
// returns them as bwrapView.etc binds.
func writeEtc(dir, hosts string) ([][2]string, error) {
	files := [][2]string{
		{"passwd", fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:%d:%d:agent:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", insideUID, insideUID, agentHome)},
		{"group", fmt.Sprintf("root:x:0:\nagent:x:%d:\nnogroup:x:65534:\n", insideUID)},
		{"hosts", hosts},
		// Names come from the jail's hosts file only: there is no DNS.
		{"nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"},
	}
	var binds [][2]string
	for _, f := range files {
		p := filepath.Join(dir, f[0])
		if err := os.WriteFile(p, []byte(f[1]), 0o644); err != nil {
			return nil, fmt.Errorf("jail: writing the jail's /etc/%s: %w", f[0], err)
		}
		binds = append(binds, [2]string{f[0], p})
	}
	return binds, os.Chmod(dir, 0o755)
}

// copyTree copies the template directory src into dst (which exists):
// directories, regular files and symlinks (as links, never followed).
// Other kinds of file are refused.
func copyTree(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("jail: Spec.Home %q: %w", src, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("jail: Spec.Home %q is not a directory", src)
	}
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("jail: copying the HOME template: %w", err)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		to := filepath.Join(dst, rel)
		switch t := e.Type(); {
		case t.IsDir():
			return os.Mkdir(to, 0o700)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("jail: copying the HOME template: %w", err)
			}
			return os.Symlink(target, to)
		case t.IsRegular():
			return copyFile(p, to)
		default:
			return fmt.Errorf("jail: the HOME template holds %s, which is neither a file, a directory nor a symlink; remove it", rel)
		}
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("jail: copying the HOME template: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("jail: copying the HOME template: %w", err)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm()|0o600)
	if err != nil {
		return fmt.Errorf("jail: copying the HOME template: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("jail: copying the HOME template: %w", err)
	}
	return out.Close()
}

// workspacePath validates the workspace and returns its cleaned path and
// its real one (symlinks resolved).
func (s *agentSettings) workspacePath(ws string) (string, string, error) {
	if ws == "" || !filepath.IsAbs(ws) {
		return "", "", fmt.Errorf("jail: Spec.Workspace %q is not an absolute path", ws)
	}
	ws = filepath.Clean(ws)
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return "", "", fmt.Errorf("jail: Spec.Workspace: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("jail: Spec.Workspace %q is not a directory", ws)
	}
	for _, p := range []string{ws, real} {
		if err := s.mountable(p); err != nil {
			return "", "", fmt.Errorf("jail: Spec.Workspace %q: %v", ws, err)
		}
		if within(p, s.dir) && strings.HasPrefix(filepath.Base(firstBelow(p, s.dir)), agentPrivatePrefix) {
			return "", "", fmt.Errorf("jail: Spec.Workspace %q lies in another agent's private directory", ws)
		}
		if within(p, agentHome) || p == "/tmp" {
			return "", "", fmt.Errorf("jail: Spec.Workspace %q would hide or be hidden by the jail's own HOME or /tmp; pick another directory", ws)
		}
	}
	return ws, real, nil
}

// homePath validates Spec.HomeDir ("" is a private HOME) against the
// workspace's real path ws and returns it cleaned. A HomeDir that exists
// must be a directory, not a link: a link could point the agent's HOME,
// and the hand-over to its user, anywhere.
func (s *agentSettings) homePath(home, ws string) (string, error) {
	if home == "" {
		return "", nil
	}
	if !filepath.IsAbs(home) {
		return "", fmt.Errorf("jail: Spec.HomeDir %q is not an absolute path", home)
	}
	home = filepath.Clean(home)
	parent, err := filepath.EvalSymlinks(filepath.Dir(home))
	if err != nil {
		return "", fmt.Errorf("jail: Spec.HomeDir: its parent directory: %w", err)
	}
	home = filepath.Join(parent, filepath.Base(home))
	if fi, err := os.Lstat(home); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("jail: Spec.HomeDir %q is not a directory (a link is refused); remove it", home)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("jail: Spec.HomeDir: %w", err)
	}
	if err := s.mountable(home); err != nil {
		return "", fmt.Errorf("jail: Spec.HomeDir %q: %v", home, err)
	}
	switch {
	case within(home, ws) || within(ws, home):
		return "", fmt.Errorf("jail: Spec.HomeDir %q and the workspace %s overlap; put the HOME beside the workspace, not in it", home, ws)
	case within(home, s.dir) && strings.HasPrefix(firstBelow(home, s.dir), cellPrefix):
		return "", fmt.Errorf("jail: Spec.HomeDir %q lies in a jail's private directory; put it beside the workspace", home)
	case within(home, agentHome) || home == "/tmp":
		return "", fmt.Errorf("jail: Spec.HomeDir %q would hide or be hidden by the jail's own HOME or /tmp; pick another directory", home)
	}
	if err := reachable("Spec.HomeDir", home, s.uid, s.gid); err != nil {
		return "", err
	}
	return home, nil
}

// seedHome makes the kept HOME home when it does not exist yet, holding
// a copy of the template (when there is one). The copy is made beside it
// and renamed into place, so a launch that fails halfway leaves no HOME
// half seeded.
func seedHome(home, template string) error {
	if _, err := os.Lstat(home); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(home), "."+filepath.Base(home)+".seed-")
	if err != nil {
		return fmt.Errorf("jail: making the agent's HOME: %w", err)
	}
	if template != "" {
		if err := copyTree(template, tmp); err != nil {
			_ = os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, home); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("jail: making the agent's HOME: %w", err)
	}
	return nil
}

// firstBelow is the first path component of p below base.
func firstBelow(p, base string) string {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	return first
}

// reachable refuses a path the jail's user cannot reach: bubblewrap, run
// as that user, must traverse every directory above it.
func reachable(what, p string, uid, gid int) error {
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("jail: %s: %w", what, err)
		}
		var bit fs.FileMode = 0o001
		if ou, og, ok := fileOwner(fi); ok {
			switch {
			case ou == uid:
				bit = 0o100
			case og == gid:
				bit = 0o010
			}
		}
		if fi.Mode().Perm()&bit == 0 {
			return fmt.Errorf("jail: %s %s is out of reach of the jail's uid %d: %s is mode %#o; make it traversable (chmod o+x %s) or use another place", what, p, uid, d, fi.Mode().Perm(), d)
		}
		if d == "/" {
			return nil
		}
	}
}
