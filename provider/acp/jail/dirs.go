package jail

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// sessionDirs is one launch's private directory on the host: HOME, /tmp
// and the generated /etc files. It is removed when the jail ends.
type sessionDirs struct {
	root, home, tmp, etc string
}

// newSessionDirs makes the private directory; prepare, when set, is
// called with it while it is still empty (a Confiner mounts a capped file
// system there), and what it returns is undone by the caller's release.
func newSessionDirs(parent, label string, prepare func(root string) error) (sessionDirs, error) {
	if label == "" {
		label = "agent"
	}
	root, err := os.MkdirTemp(parent, "agentry-agent-"+label+"-")
	if err != nil {
		return sessionDirs{}, fmt.Errorf("jail: making the agent's private directory in %s: %w", parent, err)
	}
	d := sessionDirs{root: root, home: filepath.Join(root, "home"), tmp: filepath.Join(root, "tmp"), etc: filepath.Join(root, "etc")}
	if prepare != nil {
		if err := prepare(root); err != nil {
			return d, err
		}
	}
	for _, p := range []string{d.home, d.tmp, d.etc} {
		if err := os.Mkdir(p, 0o700); err != nil {
			d.remove()
			return sessionDirs{}, fmt.Errorf("jail: making the agent's private directory: %w", err)
		}
	}
	return d, nil
}

func (d sessionDirs) remove() error {
	if d.root == "" {
		return nil
	}
	return os.RemoveAll(d.root)
}

// writeEtc writes the jail's own passwd, group, hosts and nsswitch.conf:
// the agent's user, and the names of the allowed hosts.
func (d sessionDirs) writeEtc(hosts string) error {
	files := map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:%d:%d:agent:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", InsideUID, InsideUID, Home),
		"group":  fmt.Sprintf("root:x:0:\nagent:x:%d:\nnogroup:x:65534:\n", InsideUID),
		"hosts":  hosts,
		// Names come from the jail's hosts file only: there is no DNS.
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(d.etc, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("jail: writing the jail's /etc/%s: %w", name, err)
		}
	}
	return os.Chmod(d.etc, 0o755)
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

// workspacePath validates the workspace and returns its cleaned path and
// its real one (symlinks resolved).
func (s *settings) workspacePath(ws string) (string, string, error) {
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
		if within(p, s.dir) && strings.HasPrefix(filepath.Base(firstBelow(p, s.dir)), "agentry-agent-") {
			return "", "", fmt.Errorf("jail: Spec.Workspace %q lies in another agent's private directory", ws)
		}
		if within(p, Home) || p == "/tmp" {
			return "", "", fmt.Errorf("jail: Spec.Workspace %q would hide or be hidden by the jail's own HOME or /tmp; pick another directory", ws)
		}
	}
	return ws, real, nil
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
		if ou, og, ok := owner(fi); ok {
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
