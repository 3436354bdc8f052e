package jail

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// bwrapWords are the string constants only code that starts bubblewrap
// or writes its command line needs: its program name and its options.
// The options other programs share (genericBwrapWords: Hydra's serve takes
// --dev) count only in a file that also names bubblewrap or one of its own.
var bwrapWords = []string{"--unshare-", "--ro-bind", "--dev-bind", "--remount-ro", "--die-with-parent",
	"--new-session", "--seccomp", "--block-fd", "--info-fd", "--disable-userns"}

var genericBwrapWords = []string{"--bind", "--proc", "--dev", "--tmpfs", "--chdir", "--hostname"}

// bwrapUses lists, as "file:line: value", every string constant in the
// non-test Go files under root that names bubblewrap ("bwrap", a path
// ending in /bwrap) or one of its options: what building its arguments or
// starting it takes.
func bwrapUses(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		var own, generic []string
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			rel, _ := filepath.Rel(root, p)
			at := filepath.ToSlash(rel) + ":" + strconv.Itoa(fset.Position(lit.Pos()).Line) + ": " + v
			switch {
			case namesBwrap(v):
				own = append(own, at)
			case slices.Contains(genericBwrapWords, v):
				generic = append(generic, at)
			}
			return true
		})
		out = append(out, own...)
		if len(own) > 0 {
			out = append(out, generic...)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scanning %s: %v", root, err)
	}
	return out
}

func namesBwrap(v string) bool {
	if v == "bwrap" || strings.HasSuffix(v, "/bwrap") {
		return true
	}
	for _, w := range bwrapWords {
		if v == w || strings.HasSuffix(w, "-") && strings.HasPrefix(v, w) {
			return true
		}
	}
	return false
}

// The import rule of the third build: exactly one package in non-test
// code builds bubblewrap's arguments or starts bwrap — this one.
func TestOnlyTheJailStartsBubblewrap(t *testing.T) {
	uses := bwrapUses(t, "..")
	var here int
	for _, u := range uses {
		if strings.HasPrefix(u, "jail/") && !strings.Contains(strings.TrimPrefix(u, "jail/"), "/") {
			here++
			continue
		}
		t.Errorf("%s: only package jail may name bubblewrap or its options; ask the jail for what you need", u)
	}
	if here == 0 {
		t.Fatal("the scan found bubblewrap nowhere, not even in package jail: it is broken")
	}
}

// The scan catches another package that starts bwrap or writes one of its
// options, in any quoting, and leaves tests alone.
func TestBwrapScanCatchesAnotherPackage(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"other/start.go":      "package other\n\nimport \"os/exec\"\n\nvar c = exec.Command(\"bwrap\", \"--unshare-all\")\n",
		"other/path.go":       "package other\n\nconst p = `/usr/bin/bwrap`\n",
		"other/args.go":       "package other\n\nvar a = []string{\"--ro-bind\", \"/usr\", \"/usr\"}\n",
		"other/start_test.go": "package other\n\nvar t = \"bwrap\"\n",
		"other/fine.go":       "package other\n\nconst id = \"local-process+bwrap\"\nvar f = \"--bindings\"\n",
		"other/testdata/x.go": "package x\n\nvar y = \"bwrap\"\n",
		"other/serve.go":      "package other\n\nvar s = []string{\"serve\", \"--dev\"}\n",
		"other/mounts.go":     "package other\n\nvar m = []string{\"--die-with-parent\", \"--proc\", \"/proc\"}\n",
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := bwrapUses(t, root)
	slices.Sort(got)
	want := []string{"other/args.go:3: --ro-bind", "other/mounts.go:3: --die-with-parent", "other/mounts.go:3: --proc", "other/path.go:3: /usr/bin/bwrap", "other/start.go:5: --unshare-all", "other/start.go:5: bwrap"}
	if !slices.Equal(got, want) {
		t.Fatalf("the scan found\n%q\nwant\n%q", got, want)
	}
}
