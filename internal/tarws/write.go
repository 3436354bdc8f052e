package tarws

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
)

// ErrNoPath is Write asked for a path the workspace does not hold.
var ErrNoPath = errors.New("tarws: the workspace holds nothing at that path; list it with no path to see what it holds")

// Write streams the directory root is opened on — or the path sub inside
// it ("" or "." for all of it) — to w as an uncompressed tar, names
// relative to the workspace. Symbolic links go out as links, never
// followed; anything but files, directories and links is left out. A sub
// that is not a local name is a *RefusalError (CodeUnsafePath); one that
// names nothing is ErrNoPath. Nothing is written to w before sub is found.
func Write(ctx context.Context, w io.Writer, root *os.Root, sub string) error {
	if sub == "" {
		sub = "."
	}
	name, err := localName(sub)
	if err != nil {
		return &RefusalError{Code: CodeUnsafePath, Entry: -1, Name: clip(sub), Msg: err.Error()}
	}
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) || isEscape(err) {
		return ErrNoPath
	}
	if err != nil {
		return fmt.Errorf("tarws: reading the workspace: %w", err)
	}
	tw := tar.NewWriter(w)
	if fi.IsDir() {
		err = fs.WalkDir(root.FS(), name, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if p == "." {
				return nil // the workspace itself
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone since it was listed
			}
			if err != nil {
				return err
			}
			return put(tw, root, p, info)
		})
	} else {
		err = put(tw, root, name, fi)
	}
	if err != nil {
		return fmt.Errorf("tarws: writing the workspace out: %w", err)
	}
	return tw.Close()
}

// put writes one entry.
func put(tw *tar.Writer, root *os.Root, name string, fi fs.FileInfo) error {
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode() & fs.ModePerm), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	switch {
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(hdr)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(name)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case !fi.Mode().IsRegular():
		return nil // a FIFO or socket the agent made: not workspace content
	}
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	// The size of what was opened, not of what was listed: the agent may
	// have changed it since.
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return nil
	}
	hdr.Typeflag, hdr.Size, hdr.ModTime = tar.TypeReg, st.Size(), st.ModTime()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, st.Size()); err != nil {
		return fmt.Errorf("%s changed while it was read: %w", path.Clean(name), err)
	}
	return nil
}
