package tarws_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/internal/tarws"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// entry is one tar entry to build.
type entry struct {
	name, link, body string
	typ              byte
	size             int64 // when set, the header's size (no body is written)
	mode             int64
}

// archive builds a tar stream of es. An entry with size set gets only its
// header: the stream ends there.
func archive(t testing.TB, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: mode, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.size > 0 {
			h.Size = e.size
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layout is a workspace with a sibling directory that must stay as it is.
type layout struct {
	parent, ws, outside string
	root                *os.Root
}

func newLayout(t testing.TB) *layout {
	t.Helper()
	p := t.TempDir()
	l := &layout{parent: p, ws: filepath.Join(p, "ws"), outside: filepath.Join(p, "outside")}
	for _, d := range []string{l.ws, l.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.outside, "secret"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(l.ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	l.root = r
	return l
}

// untouched fails the test when anything outside the workspace changed.
func (l *layout) untouched(t testing.TB) {
	t.Helper()
	var got []string
	_ = filepath.WalkDir(l.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatalf("walking: %v", err)
		}
		rel, _ := filepath.Rel(l.parent, p)
		if rel == "ws" {
			return fs.SkipDir
		}
		got = append(got, rel)
		return nil
	})
	want := []string{".", "outside", filepath.Join("outside", "secret")}
	if !slices.Equal(got, want) {
		t.Fatalf("outside the workspace: %v, want %v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(l.outside, "secret"))
	if err != nil || string(b) != "keep" {
		t.Fatalf("outside/secret = %q, %v", b, err)
	}
}

func refusal(t *testing.T, err error, want tarws.Code) {
	t.Helper()
	var re *tarws.RefusalError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want a refusal %s", err, err, want)
	}
	if re.Code != want {
		t.Fatalf("refused %s (%v), want %s", re.Code, err, want)
	}
	if strings.ContainsAny(re.Error()[:1], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		t.Fatalf("error %q starts upper-case", re.Error())
	}
}

func TestExtractRefusesWhatLeavesTheWorkspace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		es   []entry
		want tarws.Code
	}{
		{"dotdot", []entry{{name: "../x", body: "evil"}}, tarws.CodeUnsafePath},
		{"dotdot inside", []entry{{name: "a/../../outside/x", body: "evil"}}, tarws.CodeUnsafePath},
		{"absolute", []entry{{name: filepath.Join(os.TempDir(), "agentry-tarws-abs"), body: "evil"}}, tarws.CodeUnsafePath},
		{"symlink absolute", []entry{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, tarws.CodeLinkOutside},
		{"symlink climbing", []entry{{name: "a/l", typ: tar.TypeSymlink, link: "../../outside"}}, tarws.CodeLinkOutside},
		{"hard link out", []entry{{name: "h", typ: tar.TypeLink, link: "../outside/secret"}}, tarws.CodeLinkOutside},
		{"hard link absolute", []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, tarws.CodeLinkOutside},
		{"hard link to nothing", []entry{{name: "h", typ: tar.TypeLink, link: "missing"}}, tarws.CodeLinkOutside},
		{"char device", []entry{{name: "null", typ: tar.TypeChar}}, tarws.CodeSpecialFile},
		{"block device", []entry{{name: "sda", typ: tar.TypeBlock}}, tarws.CodeSpecialFile},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo}}, tarws.CodeSpecialFile},
		{"2 GiB", []entry{{name: "big", size: 2 << 30}}, tarws.CodeTooLarge},
		{"empty", nil, tarws.CodeInvalidArchive},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newLayout(t)
			_, err := tarws.Extract(context.Background(), bytes.NewReader(archive(t, c.es...)), l.root, tarws.Limits{})
			refusal(t, err, c.want)
			l.untouched(t)
		})
	}
}

// TestExtractRefusesAWayOutThroughALinkAlreadyThere: a symlink the agent
// planted in its workspace does not carry an upload's write outside.
func TestExtractRefusesAWayOutThroughALinkAlreadyThere(t *testing.T) {
	t.Parallel()
	l := newLayout(t)
	if err := os.Symlink(l.outside, filepath.Join(l.ws, "door")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside/secret", filepath.Join(l.ws, "file")); err != nil {
		t.Fatal(err)
	}
	for _, es := range [][]entry{
		{{name: "door/x", body: "evil"}},
		{{name: "door/sub/", typ: tar.TypeDir}},
		{{name: "door/secret", body: "evil"}},
	} {
		_, err := tarws.Extract(context.Background(), bytes.NewReader(archive(t, es...)), l.root, tarws.Limits{})
		refusal(t, err, tarws.CodeLinkOutside)
		l.untouched(t)
	}
	// A file over a link replaces the link; it never writes through it.
	if _, err := tarws.Extract(context.Background(), bytes.NewReader(archive(t, entry{name: "file", body: "mine"})), l.root, tarws.Limits{}); err != nil {
		t.Fatal(err)
	}
	l.untouched(t)
	if b, _ := os.ReadFile(filepath.Join(l.ws, "file")); string(b) != "mine" {
		t.Fatalf("file = %q", b)
	}
}

func TestExtractBoundsBytesAndEntries(t *testing.T) {
	t.Parallel()
	l := newLayout(t)
	es := []entry{{name: "a", body: "12345"}, {name: "b", body: "67890"}}
	_, err := tarws.Extract(context.Background(), bytes.NewReader(archive(t, es...)), l.root, tarws.Limits{MaxBytes: 8})
	refusal(t, err, tarws.CodeTooLarge)
	_, err = tarws.Extract(context.Background(), bytes.NewReader(archive(t, es...)), l.root, tarws.Limits{MaxEntries: 1})
	refusal(t, err, tarws.CodeTooManyEntries)
	st, err := tarws.Extract(context.Background(), bytes.NewReader(archive(t, es...)), l.root, tarws.Limits{MaxBytes: 10, MaxEntries: 2})
	if err != nil || st.Entries != 2 || st.Bytes != 10 {
		t.Fatalf("at the bounds: %+v, %v", st, err)
	}
	l.untouched(t)
}

// TestExtractRefusesAMillionEntries streams a million entries; the
// extraction stops at the default bound without reading the rest.
func TestExtractRefusesAMillionEntries(t *testing.T) {
	t.Parallel()
	l := newLayout(t)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		tw := tar.NewWriter(pw)
		var err error
		for i := 0; i < 1_000_000 && err == nil; i++ {
			err = tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
		done <- err
	}()
	st, err := tarws.Extract(context.Background(), pr, l.root, tarws.Limits{})
	pr.CloseWithError(errors.New("stopped reading"))
	if werr := <-done; werr == nil {
		t.Fatal("the whole million was read")
	}
	refusal(t, err, tarws.CodeTooManyEntries)
	if st.Entries != tarws.DefaultMaxEntries {
		t.Fatalf("wrote %d entries before refusing, want %d", st.Entries, tarws.DefaultMaxEntries)
	}
	l.untouched(t)
}

func TestExtractGzipAndWriteRoundTrip(t *testing.T) {
	t.Parallel()
	l := newLayout(t)
	bin := make([]byte, 70_000)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	es := []entry{
		{name: "src/", typ: tar.TypeDir, mode: 0o755},
		{name: "src/main.go", body: "package main\n"},
		{name: "src/run.sh", body: "#!/bin/sh\necho hi\n", mode: 0o4755},
		{name: "data/blob.bin", body: string(bin)},
		{name: "src/link", typ: tar.TypeSymlink, link: "../data/blob.bin"},
		{name: "src/hard", typ: tar.TypeLink, link: "src/main.go"},
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(archive(t, es...))
	_ = zw.Close()
	st, err := tarws.Extract(context.Background(), &gz, l.root, tarws.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != len(es) || st.Bytes != int64(13+18+len(bin)) {
		t.Fatalf("stats %+v", st)
	}
	fi, err := os.Stat(filepath.Join(l.ws, "src/run.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Mode()&fs.ModeSetuid != 0 {
		t.Fatalf("run.sh mode %v, %v: want 0755 without setuid", fi.Mode(), err)
	}

	var out bytes.Buffer
	if err := tarws.Write(context.Background(), &out, l.root, ""); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + ":" + h.Linkname + ":" + string(b)
	}
	want := map[string]string{
		"data/":         "5::",
		"data/blob.bin": "0::" + string(bin),
		"src/":          "5::",
		"src/main.go":   "0::package main\n",
		"src/hard":      "0::package main\n",
		"src/run.sh":    "0::#!/bin/sh\necho hi\n",
		"src/link":      "2:../data/blob.bin:",
	}
	if len(got) != len(want) {
		t.Fatalf("downloaded %d entries, want %d: %v", len(got), len(want), keys(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: got %.40q, want %.40q", k, got[k], v)
		}
	}

	// One path: a file, a directory, a missing one, an unsafe one.
	out.Reset()
	if err := tarws.Write(context.Background(), &out, l.root, "src/main.go"); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(&out).Next()
	if err != nil || h.Name != "src/main.go" {
		t.Fatalf("one file: %v %v", h, err)
	}
	if err := tarws.Write(context.Background(), io.Discard, l.root, "nope"); !errors.Is(err, tarws.ErrNoPath) {
		t.Fatalf("missing path: %v", err)
	}
	if err := tarws.Write(context.Background(), io.Discard, l.root, "../outside"); err == nil {
		t.Fatal("an unsafe path was written out")
	}
	l.untouched(t)
}

func TestExtractRefusesGarbage(t *testing.T) {
	t.Parallel()
	l := newLayout(t)
	for _, in := range [][]byte{[]byte("not a tar at all, but long enough to be read as a header block? no." + strings.Repeat("x", 600)), {0x1f, 0x8b, 0, 0}} {
		_, err := tarws.Extract(context.Background(), bytes.NewReader(in), l.root, tarws.Limits{})
		refusal(t, err, tarws.CodeInvalidArchive)
	}
	// Cut inside a file.
	full := archive(t, entry{name: "f", body: strings.Repeat("y", 2000)})
	_, err := tarws.Extract(context.Background(), bytes.NewReader(full[:1000]), l.root, tarws.Limits{})
	refusal(t, err, tarws.CodeInvalidArchive)
	l.untouched(t)
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
