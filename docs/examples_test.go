// This test runs the shell examples the pages mark as runnable offline,
// so they stay true.
//
// A fenced block whose info string is "sh offline" runs in an empty
// temporary directory; "sh offline checkout" runs at the root of the
// checkout and must leave it as it found it. Each runs in bash with -e and
// -o pipefail, with an agentry built from this checkout first on PATH, a
// HOME of its own and stdin empty, and fails the test on a non-zero exit.
// CONTRIBUTING.md says when to mark a block.

package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// example is one marked block.
type example struct {
	file     string // relative to the checkout
	line     int    // of the opening fence
	checkout bool   // runs at the checkout's root
	script   string
}

// markerWords are the words a block's info string may carry after "sh".
var markerWords = []string{"offline", "checkout"}

// pages are the Markdown files whose examples are checked.
func pages(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, filepath.Join(root, f))
		}
	}
	return files
}

// parseExamples returns the marked blocks of one Markdown page, and an
// error for a fence whose info string carries a word that is not a marker
// (a misspelt "offline" would otherwise leave a block untested, silently).
func parseExamples(name string, page []byte) ([]example, error) {
	var (
		out   []example
		cur   *example
		body  strings.Builder
		fence string
	)
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && strings.HasPrefix(trimmed, "```"):
			open := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
			if strings.Contains(trimmed[len(open):], "`") {
				continue // an inline code span, not a fence (CommonMark)
			}
			fence = open
			words := strings.Fields(trimmed[len(fence):])
			if len(words) < 2 || words[0] != "sh" {
				continue // not a marked shell block (or only "sh")
			}
			ex := example{file: name, line: n}
			for _, w := range words[1:] {
				if !slices.Contains(markerWords, w) {
					return nil, fmt.Errorf("%s:%d: %q is not a marker (a shell block takes %q)", name, n, w, markerWords)
				}
				ex.checkout = ex.checkout || w == "checkout"
			}
			if !slices.Contains(words[1:], "offline") {
				return nil, fmt.Errorf("%s:%d: %q without offline marks nothing", name, n, trimmed)
			}
			cur = &ex
			body.Reset()
		case fence != "" && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`") == "":
			fence = ""
			if cur != nil {
				cur.script = body.String()
				out = append(out, *cur)
				cur = nil
			}
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if fence != "" {
		return nil, fmt.Errorf("%s: a fenced block is never closed", name)
	}
	return out, sc.Err()
}

func TestDocsExamples(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var all []example
	for _, f := range pages(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		exs, err := parseExamples(rel, b)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, exs...)
	}
	if len(all) == 0 {
		t.Fatal("no block is marked sh offline; the docs have runnable examples")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is missing: %v", err)
	}
	env := exampleEnv(t, root)
	for _, ex := range all {
		t.Run(fmt.Sprintf("%s:%d", ex.file, ex.line), func(t *testing.T) {
			runExample(t, bash, root, env, ex)
		})
	}
}

// exampleEnv builds agentry and returns the environment the examples run
// in: that agentry first on PATH (and go install's target), a HOME of
// their own, and the go command pointed at this machine's caches so it
// neither downloads nor rebuilds what it has.
func exampleEnv(t *testing.T, root string) []string {
	t.Helper()
	bin, home := t.TempDir(), t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "agentry"), ".")
	build.Dir = filepath.Join(root, "cmd", "agentry")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/agentry: %v\n%s", err, out)
	}
	goenv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	v := strings.Split(strings.TrimSpace(string(goenv)), "\n")
	if len(v) != 4 {
		t.Fatalf("go env: %q", goenv)
	}
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "PATH", "HOME", "GOBIN", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV", "PWD", "OLDPWD":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+home, "GOBIN="+bin,
		"GOCACHE="+v[0], "GOMODCACHE="+v[1], "GOPATH="+v[2], "GOENV="+v[3])
}

func runExample(t *testing.T, bash, root string, env []string, ex example) {
	dir := t.TempDir()
	var before string
	if ex.checkout {
		dir = root
		before = checkoutState(t, root)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-e", "-o", "pipefail", "-c", ex.script)
	cmd.Dir = dir
	cmd.Env = append(env, "PWD="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s:%d failed (%v):\n%s\noutput:\n%s", ex.file, ex.line, err, ex.script, out.String())
	}
	if ex.checkout {
		if after := checkoutState(t, root); after != before {
			t.Fatalf("%s:%d changed the checkout (a checkout example must only read it):\nbefore:\n%s\nafter:\n%s", ex.file, ex.line, before, after)
		}
	}
}

// checkoutState is git's view of the checkout's changes and untracked files.
func checkoutState(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("git", "status", "--porcelain", "--untracked-files=all")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git status: %v", err)
	}
	return string(out)
}
