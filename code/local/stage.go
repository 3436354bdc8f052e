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
	"github.com/agentry-dev/agentry/jail"
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

// sessionPrefix starts every session directory's name; what follows is
// the key's digest (or "pool" for a pool member not yet handed out).
const sessionPrefix = "agentry-"

// openCell makes a session's cell under base — its work and tmp
// directories, jailed or not — named after the key's digest (or prefix,
// when given), marked as this process's so that a later runner sweeps it
// if this one is killed.
func openCell(base, key string, j *jail.Code, prefix string) (*jail.Cell, error) {
	if prefix == "" {
		prefix = sessionPrefix + toolsession.HashKey(key) + "-"
	}
	c, err := j.Open(base, prefix)
	if err != nil {
		return nil, fmt.Errorf("local: %w (Options.Dir)", err)
	}
	return c, nil
}

// workDir is the code's working directory on the host (/work in a jail).
func workDir(c *jail.Cell) string { return c.Dir("work") }

// stager lands inputs in a session's work directory and remembers them
// for AGENTRY_INPUTS.
type stager struct {
	cell *jail.Cell

	mu     sync.Mutex
	inputs map[string]string // name → path as the code sees it
	env    string            // JSON of inputs
}

func newStager(c *jail.Cell) *stager {
	return &stager{cell: c, inputs: map[string]string{}, env: "{}"}
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
	work := workDir(s.cell)
	r, err := os.OpenRoot(work)
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
		out = append(out, code.Staged{Name: x.Name, Path: s.cell.View(filepath.Join(work, name)), Bytes: len(x.Data)})
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
