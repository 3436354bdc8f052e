package local

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/internal/sandbox"
	"github.com/agentry-dev/agentry/toolsession"
)

// MaxNameBytes bounds the file name an input lands under.
const MaxNameBytes = 120

// SafeName encodes an input's name (caller data) into one file-name
// segment: at most MaxNameBytes bytes of [A-Za-z0-9._%~-], never "." or
// "..", never hidden (no leading dot), never containing "/". Distinct
// names give distinct segments: letters, digits, "_" and "-" stand for
// themselves, "." stands for itself except first, every other byte is
// %XX, and a name whose encoding is too long is shortened and ends in "~"
// and 24 hex digits of its SHA-256 ("~" never appears otherwise).
func SafeName(name string) string {
	const hexdig = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexdig[c>>4])
			b.WriteByte(hexdig[c&15])
		}
	}
	s := b.String()
	if len(s) <= MaxNameBytes && s != "" {
		return s
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "~" + hex.EncodeToString(sum[:12])
	keep := MaxNameBytes - len(suffix)
	if keep > len(s) {
		keep = len(s)
	}
	// Never cut an escape in half.
	for i := keep - 1; i >= 0 && i >= keep-2; i-- {
		if s[i] == '%' {
			keep = i
			break
		}
	}
	return s[:keep] + suffix
}

// sessionDirs are one session's directories on the host.
type sessionDirs struct {
	root string // private; holds the others and the owner marker
	fs   string // the size-capped tmpfs holding work and tmp; "" when there is none
	work string // the code's working directory (/work in a jail)
	tmp  string // the jail's /tmp
}

// sessionPrefix starts every session directory's name; what follows is
// the key's digest (or "pool" for a pool member not yet handed out).
const sessionPrefix = "agentry-"

// newSessionDirs makes a session's directories under base, named after
// the key's digest (or prefix, when given), marked as this process's so
// that a crash sweep by a later process can tell them from a live one's.
// In a jail that can mount, work and tmp live on one tmpfs of the jail's
// disk cap.
func newSessionDirs(base, key string, j *jailSettings, prefix string) (sessionDirs, error) {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return sessionDirs{}, fmt.Errorf("local: making the session base directory: %w; set Options.Dir to a writable directory", err)
	}
	if prefix == "" {
		prefix = sessionPrefix + toolsession.HashKey(key) + "-"
	}
	root, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return sessionDirs{}, fmt.Errorf("local: making the session directory: %w; set Options.Dir to a writable directory", err)
	}
	d := sessionDirs{root: root}
	fail := func(err error) (sessionDirs, error) {
		d.remove()
		return sessionDirs{}, err
	}
	if err := sandbox.Claim(root); err != nil {
		return fail(err)
	}
	parent := root
	if j != nil && j.tmpfs {
		d.fs = filepath.Join(root, "fs")
		if err := os.Mkdir(d.fs, 0o700); err != nil {
			return fail(fmt.Errorf("local: making the session directory: %w", err))
		}
		uid, gid := os.Getuid(), os.Getgid()
		if j.dropRoot {
			uid, gid = j.uid, j.gid
		}
		if err := sandbox.MountTmpfs(d.fs, j.disk, uid, gid); err != nil {
			d.fs = ""
			return fail(fmt.Errorf("local: the session's disk cap: %w", err))
		}
		parent = d.fs
	}
	d.work, d.tmp = filepath.Join(parent, "work"), filepath.Join(parent, "tmp")
	for _, p := range []string{d.work, d.tmp} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return fail(fmt.Errorf("local: making the session directory: %w", err))
		}
	}
	return d, nil
}

// renamed is d after its root moved to root.
func (d sessionDirs) renamed(root string) sessionDirs {
	move := func(p string) string {
		if p == "" {
			return ""
		}
		return root + strings.TrimPrefix(p, d.root)
	}
	return sessionDirs{root: root, fs: move(d.fs), work: move(d.work), tmp: move(d.tmp)}
}

// remove unmounts the session's tmpfs and deletes its directories.
func (d sessionDirs) remove() error {
	if d.root == "" {
		return nil
	}
	if d.fs != "" {
		if err := sandbox.Unmount(d.fs); err != nil {
			return fmt.Errorf("local: removing the session directory: %w", err)
		}
	}
	if err := sandbox.RemoveAll(d.root); err != nil {
		return fmt.Errorf("local: removing the session directory: %w", err)
	}
	return nil
}

// stager lands inputs in a session's work directory and remembers them
// for AGENTRY_INPUTS.
type stager struct {
	dirs sessionDirs
	jail *jailSettings

	mu     sync.Mutex
	inputs map[string]string // name → path as the code sees it
	env    string            // JSON of inputs
}

func newStager(d sessionDirs, j *jailSettings) *stager {
	return &stager{dirs: d, jail: j, inputs: map[string]string{}, env: "{}"}
}

// rebase points the stager at a session's directories after they moved
// (before anything was staged).
func (s *stager) rebase(d sessionDirs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirs = d
}

func (s *stager) environ() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env
}

// stage writes each input to work/inputs/<SafeName>. The work directory
// belongs to the code, so every write goes through an os.Root: a symlink
// the code planted cannot send a write outside it.
func (s *stager) stage(in []code.Input) ([]code.Staged, error) {
	seen := make(map[string]bool, len(in))
	for i, x := range in {
		if x.Name == "" {
			return nil, fmt.Errorf("local: input %d has no name; give every input a name", i)
		}
		if seen[x.Name] {
			return nil, fmt.Errorf("local: input %d repeats the name of an earlier input; names must be distinct", i)
		}
		seen[x.Name] = true
	}
	r, err := os.OpenRoot(s.dirs.work)
	if err != nil {
		return nil, fmt.Errorf("local: opening the session's work directory: %w", err)
	}
	defer r.Close()
	if err := r.Mkdir("inputs", 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("local: making the inputs directory: %w", err)
	}
	out := make([]code.Staged, 0, len(in))
	for i, x := range in {
		name := "inputs/" + SafeName(x.Name)
		f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("local: staging input %d: %w", i, err)
		}
		_, werr := f.Write(x.Data)
		cerr := f.Close()
		if werr != nil || cerr != nil {
			return nil, fmt.Errorf("local: staging input %d: %w", i, errors.Join(werr, cerr))
		}
		host := filepath.Join(s.dirs.work, name)
		seen := host
		if s.jail != nil {
			seen = s.jail.view(s.dirs, host)
		}
		out = append(out, code.Staged{Name: x.Name, Path: seen, Bytes: len(x.Data)})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range out {
		s.inputs[st.Name] = st.Path
	}
	b, err := json.Marshal(s.inputs)
	if err != nil {
		return nil, fmt.Errorf("local: encoding %s: %w", code.InputsEnv, err)
	}
	s.env = string(b)
	return out, nil
}
