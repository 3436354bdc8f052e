package acp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"
)

// errOutside refuses a path that leaves the workspace, whichever way it
// tries: "..", an absolute path elsewhere, or a symbolic link out.
var errOutside = errors.New("the path is outside the session's workspace; use a path inside it")

// workspace confines an agent's file calls to one directory. Paths are
// resolved through an os.Root, so no component — "..", an absolute
// symlink, a link swapped in while the call runs — can leave it.
type workspace struct {
	dir      string // absolute, clean: where the agent is told its cwd is
	root     *os.Root
	maxBytes int
}

func openWorkspace(dir string, maxBytes int) (*workspace, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("acp: opening the session's workspace: %w", err)
	}
	return &workspace{dir: dir, root: root, maxBytes: maxBytes}, nil
}

// owner is who should own what the client writes: the workspace's owner,
// when this process is root and the workspace belongs to someone else (the
// agent's user). It is asked at each write, not at open: a launcher may
// hand the workspace to the agent's user after the session opened it (the
// jail does), and a file the client made must stay one the agent can
// rewrite itself.
func (w *workspace) owner() (uid, gid int, ok bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	fi, err := w.root.Stat(".")
	if err != nil {
		return 0, 0, false
	}
	st, isUnix := fi.Sys().(*syscall.Stat_t)
	if !isUnix || st.Uid == 0 {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// mkdirs makes dir's missing components (relative to the workspace), each
// handed to uid:gid when chown is set.
func (w *workspace) mkdirs(dir string, uid, gid int, chown bool) error {
	cur := ""
	for _, part := range strings.Split(dir, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		err := w.root.Mkdir(cur, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if chown {
			_ = w.root.Lchown(cur, uid, gid)
		}
	}
	return nil
}

func (w *workspace) close() error { return w.root.Close() }

// rel maps a path an agent sent (absolute, as ACP asks, or relative to the
// workspace) to a path relative to the workspace, refusing one that
// leaves it lexically. Symbolic links are the root's to refuse.
func (w *workspace) rel(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 || len(p) > 4096 {
		return "", errors.New("the path is empty or malformed")
	}
	var r string
	if filepath.IsAbs(p) {
		var err error
		r, err = filepath.Rel(w.dir, filepath.Clean(p))
		if err != nil {
			return "", errOutside
		}
	} else {
		r = filepath.Clean(p)
	}
	if r != "." && !filepath.IsLocal(r) {
		return "", errOutside
	}
	return r, nil
}

// escaped reports whether err is os.Root refusing a path that escapes.
func escaped(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Err != nil && strings.Contains(pe.Err.Error(), "escapes from parent") {
		return true
	}
	var le *os.LinkError
	return errors.As(err, &le) && le.Err != nil && strings.Contains(le.Err.Error(), "escapes from parent")
}

// errNoFile says a path names nothing in the workspace.
var errNoFile = errors.New("the file does not exist")

// fsError turns a failure into what the agent is told: the cause, never
// the host path.
func fsError(err error) error {
	switch {
	case err == nil:
		return nil
	case escaped(err), errors.Is(err, errOutside):
		return errOutside
	case errors.Is(err, fs.ErrNotExist):
		return errNoFile
	case errors.Is(err, syscall.ENXIO):
		// What opening a socket (or a device with nothing behind it) says.
		return errNotRegular
	case errors.Is(err, fs.ErrPermission):
		return errors.New("permission denied")
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errors.New(pe.Err.Error())
	}
	return err
}

// errNotRegular refuses a read of anything but a regular file: a FIFO,
// a socket, a device or a directory.
var errNotRegular = errors.New("the path is not a regular file (a FIFO, socket, device or directory); read regular files only")

// read returns the text of rel: from 1-based line, at most limit lines
// (0: all).
//
// The open never blocks: it is non-blocking (a FIFO with no writer, which
// a plain open would wait on forever, opens at once), it goes through the
// root (no link leads out), and what it opened is checked with fstat before
// a byte is read: anything but a regular file is refused at once.
func (w *workspace) read(rel string, line, limit int) (string, error) {
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", fsError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fsError(err)
	}
	if !fi.Mode().IsRegular() {
		return "", errNotRegular
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(w.maxBytes)+1))
	if err != nil {
		return "", fsError(err)
	}
	if len(b) > w.maxBytes {
		return "", fmt.Errorf("the file is larger than the session's limit of %d bytes", w.maxBytes)
	}
	if !utf8.Valid(b) {
		return "", errors.New("the file is not UTF-8 text")
	}
	s := string(b)
	if line > 1 || limit > 0 {
		lines := strings.SplitAfter(s, "\n")
		start := max(line-1, 0)
		start = min(start, len(lines))
		end := len(lines)
		if limit > 0 && start+limit < end {
			end = start + limit
		}
		s = strings.Join(lines[start:end], "")
	}
	return s, nil
}

// write replaces rel's content atomically: a temporary file in the same
// directory, renamed over it. Missing parent directories are made.
func (w *workspace) write(rel, content string) error {
	if len(content) > w.maxBytes {
		return fmt.Errorf("the content is larger than the session's limit of %d bytes", w.maxBytes)
	}
	if rel == "." {
		return errors.New("the path names the workspace itself, not a file")
	}
	uid, gid, chown := w.owner()
	dir := filepath.Dir(rel)
	if dir != "." {
		if err := w.mkdirs(dir, uid, gid, chown); err != nil {
			return fsError(err)
		}
	}
	mode := fs.FileMode(0o644)
	if fi, err := w.root.Lstat(rel); err == nil {
		if fi.IsDir() {
			return errors.New("the path is a directory")
		}
		if fi.Mode().IsRegular() {
			mode = fi.Mode().Perm()
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+filepath.Base(rel)+".agentry-"+hex.EncodeToString(rnd[:]))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fsError(err)
	}
	_, werr := io.WriteString(f, content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = w.root.Remove(tmp)
		return fsError(err)
	}
	if chown {
		_ = w.root.Lchown(tmp, uid, gid)
	}
	if err := w.root.Rename(tmp, rel); err != nil {
		_ = w.root.Remove(tmp)
		return fsError(err)
	}
	return nil
}
