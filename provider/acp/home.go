package acp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// homeSuffix names a kept HOME after its workspace (Config.KeepHome).
const homeSuffix = ".home"

// homeOf is where the kept HOME of the workspace dir (its links
// resolved) lies: beside it, so it is as private as the workspace's
// parent makes the workspace, and goes where the workspace goes.
func homeOf(dir string) string { return filepath.Clean(dir) + homeSuffix }

// keptHome is the HOME an agent working in workDir (resolved) is
// launched with: its kept HOME under Config.KeepHome, else "" (a private
// one).
func (in *instance) keptHome(workDir string) string {
	if !in.cfg.KeepHome {
		return ""
	}
	return homeOf(workDir)
}

// RemoveWorkspace removes a session's working directory dir, which must
// lie under root, and the kept HOME beside it (Config.KeepHome): when dir
// is a link to a pooled agent's workspace, the link, the workspace it
// leads to (when that lies under root too) and that workspace's HOME.
// It tries every path and returns what failed; a path that does not
// exist is not a failure.
func RemoveWorkspace(root, dir string) error {
	root, dir = filepath.Clean(root), filepath.Clean(dir)
	if !under(root, dir) {
		return fmt.Errorf("acp: %s is not under the workspace root %s; nothing removed", dir, root)
	}
	paths := []string{dir, homeOf(dir)}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(dir)
		realRoot, rerr := filepath.EvalSymlinks(root)
		if err == nil && rerr == nil && under(realRoot, target) {
			paths = append(paths, target, homeOf(target))
		}
	}
	var errs []error
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("acp: removing the session's %s: %w", filepath.Base(p), err))
		}
	}
	return errors.Join(errs...)
}

// under reports whether p lies strictly below root.
func under(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != "." && filepath.IsLocal(rel)
}
