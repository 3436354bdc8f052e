// Package tarws moves a workspace in and out as a tar stream: Extract
// lands an uploaded archive (optionally gzip-compressed) in a directory,
// and Write streams a directory, or one path in it, back out.
//
// Extract trusts nothing in the archive. It promises:
//
//   - Every write goes through an [os.Root] opened on the workspace, so no
//     name, link or race (a symlink swapped in while it runs) can reach a
//     file outside it.
//   - A name that is absolute, climbs with "..", or is not a local path is
//     refused (CodeUnsafePath); a symbolic link whose target leaves the
//     workspace, or a hard link to anything outside it, is refused
//     (CodeLinkOutside); device nodes, FIFOs and sockets are refused
//     (CodeSpecialFile).
//   - The archive is bounded: the bytes of its files (CodeTooLarge, judged
//     from each header before the file is read), the number of entries
//     (CodeTooManyEntries), and the bytes read after decompression.
//   - Set-user-id, set-group-id and sticky bits are dropped; what it makes
//     belongs to whoever owns the workspace directory when this process can
//     give it away (it runs as root), so an agent running as that user can
//     change it.
//
// A refusal stops the extraction at the refused entry: the entries before
// it stay (inside the workspace), nothing after it is read.
package tarws

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// Defaults of [Limits].
const (
	DefaultMaxBytes   int64 = 1 << 30 // 1 GiB of file contents
	DefaultMaxEntries       = 100_000
)

// Limits bound one extraction. Zero values take the defaults.
type Limits struct {
	// MaxBytes bounds the sum of the sizes of the archive's files.
	MaxBytes int64
	// MaxEntries bounds the number of entries (files, directories, links).
	MaxEntries int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// Code names why an archive was refused.
type Code string

// The refusals.
const (
	CodeUnsafePath     Code = "unsafe_path"      // absolute, "..", or not a local name
	CodeLinkOutside    Code = "link_outside"     // a symlink or hard link leaving the workspace
	CodeSpecialFile    Code = "special_file"     // a device node, FIFO or socket
	CodeTooLarge       Code = "too_large"        // past Limits.MaxBytes
	CodeTooManyEntries Code = "too_many_entries" // past Limits.MaxEntries
	CodeInvalidArchive Code = "invalid_archive"  // not a tar (or gzip of one), or cut short
	CodeConflict       Code = "conflict"         // an entry collides with what the workspace holds (a file where a directory goes)
)

// RefusalError is an archive refused: which entry (its index, from 0, and
// its name, clipped) and why. Extract returns one for everything the
// archive is to blame for; other errors are the workspace's (a full disk).
type RefusalError struct {
	Code  Code
	Entry int
	Name  string
	Msg   string
}

func (e *RefusalError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("tarws: %s", e.Msg)
	}
	return fmt.Sprintf("tarws: entry %d (%q): %s", e.Entry, e.Name, e.Msg)
}

// Stats counts what an extraction wrote.
type Stats struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// maxNameBytes bounds an entry's name (and a link's target).
const maxNameBytes = 4096

// headerSlack is what the decompressed stream may hold beyond the files'
// bytes: headers, padding, and extended headers (bounded by the tar reader).
const headerSlack = 2048

// Extract lands the tar stream r (gzip-compressed or not: told by its
// first bytes) in the directory root is opened on.
func Extract(ctx context.Context, r io.Reader, root *os.Root, lim Limits) (Stats, error) {
	lim = lim.withDefaults()
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return Stats{}, &RefusalError{Code: CodeInvalidArchive, Entry: -1, Msg: "the gzip stream is unreadable; send a tar, or a gzip of one"}
		}
		defer zr.Close()
		zr.Multistream(false)
		src = zr
	}
	// Headers and padding are bounded per entry; the files' bytes by
	// MaxBytes, so the whole decompressed stream is bounded too.
	budget := lim.MaxBytes + int64(lim.MaxEntries+2)*headerSlack
	src = &capped{r: src, left: budget}
	x := extractor{root: root, lim: lim, now: time.Now()}
	x.uid, x.gid, x.chown = owner(root)
	tr := tar.NewReader(src)
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return x.stats, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if i == 0 {
				return x.stats, &RefusalError{Code: CodeInvalidArchive, Entry: -1, Msg: "the archive is empty; send a tar stream with at least one entry"}
			}
			return x.stats, nil
		}
		if err != nil {
			return x.stats, invalid(i, err)
		}
		if i >= lim.MaxEntries {
			return x.stats, &RefusalError{Code: CodeTooManyEntries, Entry: i, Name: clip(hdr.Name),
				Msg: fmt.Sprintf("the archive has more than %d entries, the most an upload may hold; send fewer files (or several archives)", lim.MaxEntries)}
		}
		if err := x.entry(i, hdr, tr); err != nil {
			return x.stats, err
		}
	}
}

func invalid(i int, err error) error {
	var ce *cappedError
	if errors.As(err, &ce) {
		return &RefusalError{Code: CodeTooLarge, Entry: i, Msg: "the archive is larger than an upload may be, after decompression"}
	}
	return &RefusalError{Code: CodeInvalidArchive, Entry: i, Msg: "the archive is not a readable tar stream (" + clip(err.Error()) + ")"}
}

type extractor struct {
	root     *os.Root
	lim      Limits
	stats    Stats
	uid, gid int
	chown    bool
	now      time.Time
}

// entry lands one header (and its contents).
func (x *extractor) entry(i int, hdr *tar.Header, body io.Reader) error {
	name, err := localName(hdr.Name)
	if err != nil {
		return &RefusalError{Code: CodeUnsafePath, Entry: i, Name: clip(hdr.Name), Msg: err.Error()}
	}
	refuse := func(code Code, format string, a ...any) error {
		return &RefusalError{Code: code, Entry: i, Name: clip(hdr.Name), Msg: fmt.Sprintf(format, a...)}
	}
	if name == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the workspace itself: it exists
		}
		return refuse(CodeUnsafePath, "the name is the workspace itself; only a directory entry may name it")
	}
	if err := x.parents(name); err != nil {
		return x.fail(i, hdr.Name, err)
	}
	perm := fs.FileMode(hdr.Mode) & fs.ModePerm
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.root.Mkdir(name, perm|0o700)
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := x.root.Lstat(name); serr == nil && fi.IsDir() {
				err = nil
			} else {
				return refuse(CodeConflict, "the workspace holds something that is not a directory at this name; remove it first")
			}
		}
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		if hdr.Size < 0 || hdr.Size > x.lim.MaxBytes-x.stats.Bytes {
			return refuse(CodeTooLarge, "the archive's files are larger than %d bytes, the most an upload may hold; send less", x.lim.MaxBytes)
		}
		err = x.file(name, perm, hdr.Size, body)
	case tar.TypeSymlink:
		if err := linkInside(name, hdr.Linkname); err != nil {
			return refuse(CodeLinkOutside, "%v", err)
		}
		err = x.replace(name, func() error { return x.root.Symlink(hdr.Linkname, name) })
	case tar.TypeLink:
		target, lerr := localName(hdr.Linkname)
		if lerr != nil || target == "." {
			return refuse(CodeLinkOutside, "a hard link must name a file inside the workspace, by a relative name without \"..\"")
		}
		err = x.replace(name, func() error { return x.root.Link(target, name) })
		if errors.Is(err, fs.ErrNotExist) {
			return refuse(CodeLinkOutside, "a hard link must name a file the archive put in the workspace earlier")
		}
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return refuse(CodeSpecialFile, "device nodes and FIFOs are not allowed in a workspace; leave them out of the archive")
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return refuse(CodeSpecialFile, "entry type %q is not allowed in a workspace; send files, directories and links", string(hdr.Typeflag))
	}
	if err != nil {
		return x.fail(i, hdr.Name, err)
	}
	if x.chown {
		// Give it to the workspace's owner; Lchown never follows a link.
		if err := x.root.Lchown(name, x.uid, x.gid); err != nil {
			return x.fail(i, hdr.Name, err)
		}
	}
	x.stats.Entries++
	return nil
}

// fail turns a filesystem error into the answer: an os.Root refusing a
// path that escapes (through a link already there) is the archive's fault.
func (x *extractor) fail(i int, name string, err error) error {
	var re *RefusalError
	if errors.As(err, &re) {
		return err
	}
	if isEscape(err) {
		return &RefusalError{Code: CodeLinkOutside, Entry: i, Name: clip(name), Msg: "the name leads outside the workspace through a symbolic link; refused"}
	}
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, fs.ErrExist) {
		return &RefusalError{Code: CodeConflict, Entry: i, Name: clip(name), Msg: "the name collides with a file or directory the workspace already holds; remove it first"}
	}
	return fmt.Errorf("tarws: writing entry %d: %w", i, err)
}

// isEscape reports whether err is an os.Root refusing a path outside it.
func isEscape(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes from parent") {
		return true
	}
	var le *os.LinkError
	return errors.As(err, &le) && strings.Contains(le.Err.Error(), "escapes from parent")
}

// parents makes the directories above name that are missing.
func (x *extractor) parents(name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	if fi, err := x.root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return syscall.ENOTDIR
		}
		return nil
	}
	if err := x.parents(dir); err != nil {
		return err
	}
	if err := x.root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if x.chown {
		return x.root.Lchown(dir, x.uid, x.gid)
	}
	return nil
}

// file writes a regular file of exactly size bytes from body.
func (x *extractor) file(name string, perm fs.FileMode, size int64, body io.Reader) error {
	if fi, err := x.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// Replace a link rather than write through it.
		if err := x.root.Remove(name); err != nil {
			return err
		}
	}
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(body, size))
	cerr := f.Close()
	x.stats.Bytes += n
	if err == nil && n < size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		var ce *cappedError
		if errors.As(err, &ce) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &RefusalError{Code: CodeInvalidArchive, Entry: -1, Name: clip(name), Msg: "the archive ends inside this file; send the whole archive"}
		}
		return err
	}
	if cerr != nil {
		return cerr
	}
	// The mode asked for, not what the umask left.
	return x.root.Chmod(name, perm)
}

// replace runs mk, first removing a file (not a directory) already at name.
func (x *extractor) replace(name string, mk func() error) error {
	if fi, err := x.root.Lstat(name); err == nil && !fi.IsDir() {
		if err := x.root.Remove(name); err != nil {
			return err
		}
	}
	return mk()
}

// localName cleans an entry's name into a local, slash-separated path,
// refusing one that is absolute, climbs with "..", or holds a NUL.
func localName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("the entry has no name")
	case len(name) > maxNameBytes:
		return "", fmt.Errorf("the name is longer than %d bytes", maxNameBytes)
	case strings.ContainsRune(name, 0):
		return "", errors.New("the name holds a NUL byte")
	case strings.HasPrefix(name, "/"):
		return "", errors.New("the name is absolute; archive paths relative to the workspace")
	case strings.Contains(name, "\\"):
		return "", errors.New("the name holds a backslash; archive with slash-separated names")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errors.New("the name climbs out with \"..\"; archive paths inside the workspace")
		}
	}
	return path.Clean(name), nil
}

// linkInside refuses a symbolic link at name whose target, read from the
// link's directory, leaves the workspace (or is absolute). A target may
// climb with ".." as long as it stays inside.
func linkInside(name, target string) error {
	switch {
	case target == "":
		return errors.New("the symbolic link has no target")
	case len(target) > maxNameBytes:
		return fmt.Errorf("the symbolic link's target is longer than %d bytes", maxNameBytes)
	case strings.ContainsRune(target, 0):
		return errors.New("the symbolic link's target holds a NUL byte")
	case strings.HasPrefix(target, "/"):
		return errors.New("the symbolic link points to an absolute path, outside the workspace; make it relative")
	}
	depth := strings.Count(path.Dir(name), "/") + 1
	if path.Dir(name) == "." {
		depth = 0
	}
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "..":
			depth--
			if depth < 0 {
				return errors.New("the symbolic link points outside the workspace")
			}
		case "", ".":
		default:
			depth++
		}
	}
	return nil
}

// clip shortens caller data shown in an error.
func clip(s string) string {
	const max = 200
	s = strings.ToValidUTF8(s, "?")
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// capped reads at most left bytes and then fails with a *cappedError.
type capped struct {
	r    io.Reader
	left int64
}

type cappedError struct{}

func (*cappedError) Error() string { return "tarws: the stream is longer than its bound" }

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, &cappedError{}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
