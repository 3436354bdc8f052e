package host

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxTokensFile bounds what a reload reads: 64 MiB is about half a
// million lines.
const maxTokensFile = 64 << 20

// racyWindow is how long after a file's modification time a read may
// still miss a later edit with the same stamp (file systems keep times
// at a granularity of up to a couple of seconds).
const racyWindow = 2 * time.Second

// TokensFile is a tokens file that follows its edits: an Authenticator
// whose admitted tokens are the file's as last read. [TokensFile.Reload]
// reads it again (serve calls it on SIGHUP) and [TokensFile.Watch] calls
// Reload whenever the file's size, modification time, change time or
// inode moves (a stat a tick, which costs nothing, sees edits in place,
// atomic renames and files mounted from a config map alike, and needs no
// watcher on the directory). A request authenticates against one whole
// version of the file, never half of an edit.
//
// A file that cannot be read or parsed keeps the tokens of the last good
// read, and Reload returns why (Watch reports it): refusing every
// caller because an editor saved half a line would take the host down
// for everyone. A removed token is refused from the first good read on.
type TokensFile struct {
	path string
	cur  atomic.Pointer[Tokens]

	mu    sync.Mutex // serialises reloads; guards the fields below
	stamp fileStamp
	// racy: the last read was so soon after the file's last write that
	// a same-size edit within the file system's timestamp granularity
	// would leave the stamp unchanged; until that is past, every tick
	// reads the file again (as git does for "racily clean" files).
	racy bool
	// check, when set, is asked before a read's tokens are admitted.
	check func(*Tokens) error
}

// fileStamp is what a stat says of a file's version.
type fileStamp struct {
	size       int64
	mod, chg   int64 // nanoseconds since the epoch
	dev, inode uint64
}

// OpenTokensFile reads the tokens file at path (see [ParseTokens]).
func OpenTokensFile(path string) (*TokensFile, error) {
	f := &TokensFile{path: path}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Authenticate authenticates against the tokens as last read.
func (f *TokensFile) Authenticate(r *http.Request) (Caller, error) {
	return f.cur.Load().Authenticate(r)
}

// SetCheck makes every later reload (by Reload or Watch) ask check
// before it admits what it read: a version check refuses is treated as a
// file that does not parse (the tokens read before stay, and why is
// returned or reported). serve uses it to refuse a file that would admit
// several principals to a host that chose its runner for one.
func (f *TokensFile) SetCheck(check func(*Tokens) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.check = check
}

// Tokens returns the tokens as last read.
func (f *TokensFile) Tokens() *Tokens { return f.cur.Load() }

// Reload reads the file again. It reports whether the admitted tokens
// changed (an edit that changes nothing is not a change); on an error the
// tokens of the last good read stay.
func (f *TokensFile) Reload() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reloadLocked()
}

func (f *TokensFile) reloadLocked() (bool, error) {
	st, b, err := readStamped(f.path)
	if err != nil {
		return false, err
	}
	t, err := ParseTokens(bytes.NewReader(b))
	if err != nil {
		return false, fmt.Errorf("%w; the tokens read before stay admitted until the file parses", err)
	}
	if f.check != nil {
		if err := f.check(t); err != nil {
			return false, fmt.Errorf("%w; the tokens read before stay admitted", err)
		}
	}
	f.stamp = st
	f.racy = !time.Now().After(time.Unix(0, st.mod).Add(racyWindow))
	old := f.cur.Swap(t)
	return old == nil || !sameTokens(old, t), nil
}

// readStamped reads a file and the stamp of the version it read (taken
// before the read, so an edit racing the read is seen again next tick).
func readStamped(path string) (fileStamp, []byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("host: reading the tokens file: %w", err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("host: reading the tokens file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return fileStamp{}, nil, fmt.Errorf("host: the tokens file %s is not a regular file", path)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(fh, maxTokensFile+1)); err != nil {
		return fileStamp{}, nil, fmt.Errorf("host: reading the tokens file: %w", err)
	}
	if buf.Len() > maxTokensFile {
		return fileStamp{}, nil, fmt.Errorf("host: the tokens file %s is over %d MiB; split the deployment's principals or prune revoked lines", path, maxTokensFile>>20)
	}
	return stampOf(info), buf.Bytes(), nil
}

// Watch reloads the file whenever a stat every interval says it changed,
// until ctx ends. report hears each reload that changed the admitted
// tokens (err nil) and each that failed (the old tokens stay); a failed
// version is reported once, not every tick.
func (f *TokensFile) Watch(ctx context.Context, interval time.Duration, report func(t *Tokens, err error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var failed fileStamp
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		info, err := os.Stat(f.path)
		f.mu.Lock()
		if err != nil || (stampOf(info) == f.stamp && !f.racy) {
			f.mu.Unlock()
			if err != nil && failed != (fileStamp{size: -1}) {
				failed = fileStamp{size: -1}
				report(nil, fmt.Errorf("host: reading the tokens file: %w; the tokens read before stay admitted", err))
			}
			continue
		}
		changed, err := f.reloadLocked()
		f.mu.Unlock()
		switch {
		case err != nil && stampOf(info) != failed:
			failed = stampOf(info)
			report(nil, err)
		case err == nil:
			failed = fileStamp{}
			if changed {
				report(f.Tokens(), nil)
			}
		}
	}
}

// sameTokens reports whether a and b admit the same tokens as the same
// callers with the same expiry.
func sameTokens(a, b *Tokens) bool {
	if len(a.entries) != len(b.entries) {
		return false
	}
	for i := range a.entries {
		x, y := a.entries[i], b.entries[i]
		if x.sum != y.sum || x.who != y.who || !x.expires.Equal(y.expires) || !x.created.Equal(y.created) {
			return false
		}
	}
	return true
}

// TokenInfo is what a tokens file says of one token, for an operator's
// listing: never the token, and only the start of its digest.
type TokenInfo struct {
	// ID is the first 12 hex digits of the token's SHA-256 digest: enough
	// to name the line (agentry token revoke ID), not enough to match a
	// token against.
	ID string
	Caller
	Created, Expires time.Time // zero when the line has none
}

// TokenIDLen is how many hex digits of a digest a TokenInfo.ID shows.
const TokenIDLen = 12

// Info lists the tokens, in file order.
func (t *Tokens) Info() []TokenInfo {
	out := make([]TokenInfo, 0, len(t.entries))
	for _, e := range t.entries {
		out = append(out, e.info())
	}
	return out
}

func (e tokenEntry) info() TokenInfo {
	return TokenInfo{ID: hex.EncodeToString(e.sum[:])[:TokenIDLen], Caller: e.who, Created: e.created, Expires: e.expires}
}

// RevokeTokens removes from the tokens file at path every line whose
// token drop says to remove, keeping comments, blank lines and the
// others as they are; it returns what it removed. The file is replaced
// atomically (a new file beside it, then a rename) with mode 0600, so a
// serve reloading it reads the old version or the new one. A file that
// does not parse is refused untouched.
func RevokeTokens(path string, drop func(TokenInfo) bool) ([]TokenInfo, error) {
	st, b, err := readStamped(path)
	if err != nil {
		return nil, err
	}
	if _, err := ParseTokens(bytes.NewReader(b)); err != nil {
		return nil, fmt.Errorf("%w; fix the file before revoking", err)
	}
	var kept strings.Builder
	var removed []TokenInfo
	for _, line := range strings.SplitAfter(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed != "" && !strings.HasPrefix(trimmed, "#") {
			e, err := parseTokenLine(trimmed)
			if err == nil && drop(e.info()) {
				removed = append(removed, e.info())
				continue
			}
		}
		kept.WriteString(line)
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := replaceFile(path, []byte(kept.String()), st); err != nil {
		return nil, err
	}
	return removed, nil
}

// replaceFile writes b to a new file beside path and renames it over
// path, refusing when path changed since it was read as st.
func replaceFile(path string, b []byte, st fileStamp) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("host: rewriting the tokens file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("host: rewriting the tokens file: %w", err)
	}
	info, err := os.Stat(path)
	if err != nil || stampOf(info) != st {
		return errors.New("host: the tokens file changed while it was being rewritten; run the command again")
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("host: rewriting the tokens file: %w", err)
	}
	return nil
}
