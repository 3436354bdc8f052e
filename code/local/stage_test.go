package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

var safeSegment = regexp.MustCompile(`^[A-Za-z0-9_\-%~][A-Za-z0-9._\-%~]*$`)

func checkSafe(t testing.TB, name, seg string) {
	t.Helper()
	if len(seg) == 0 || len(seg) > local.MaxNameBytes || seg == "." || seg == ".." ||
		strings.ContainsAny(seg, "/\x00") || !safeSegment.MatchString(seg) {
		t.Fatalf("SafeName(%q) = %q is not one safe file-name segment", name, seg)
	}
}

func TestSafeName(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"sales.csv":         "sales.csv",
		"Q3 report (v2).md": "Q3%20report%20%28v2%29.md",
		"../../etc/passwd":  "%2E.%2F..%2Fetc%2Fpasswd",
		".bashrc":           "%2Ebashrc",
		"..":                "%2E.",
		"a/b":               "a%2Fb",
		"a%2Fb":             "a%252Fb",
		"données.csv":       "donn%C3%A9es.csv",
		"x\x00y":            "x%00y",
	}
	for in, want := range tests {
		got := local.SafeName(in)
		if got != want {
			t.Errorf("SafeName(%q) = %q, want %q", in, got, want)
		}
		checkSafe(t, in, got)
	}
	long := strings.Repeat("é", 200)
	a, b := local.SafeName(long), local.SafeName(long+"!")
	checkSafe(t, long, a)
	if a == b || !strings.Contains(a, "~") {
		t.Fatalf("long names must be shortened with a digest: %q, %q", a, b)
	}
}

// FuzzSafeName: every name gives one safe segment, and distinct names give
// distinct segments.
func FuzzSafeName(f *testing.F) {
	f.Add("sales.csv", "sales%2Ecsv")
	f.Add("..", "%2E.")
	f.Add(".", "")
	f.Add(strings.Repeat("a", 120), strings.Repeat("a", 121))
	f.Add(strings.Repeat("/", 40)+"x", strings.Repeat("%2F", 40)+"x")
	f.Add("~abc", "%7Eabc")
	f.Add(strings.Repeat("é", 40), strings.Repeat("é", 39)+"e")
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, sb := local.SafeName(a), local.SafeName(b)
		checkSafe(t, a, sa)
		checkSafe(t, b, sb)
		if a != b && sa == sb {
			t.Fatalf("%q and %q both encode to %q", a, b, sa)
		}
		if a == b && sa != sb {
			t.Fatalf("SafeName is not deterministic for %q", a)
		}
	})
}

func TestStagingPublishesInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, r := range []code.Runner{local.New(options(t)), local.NewInterpreter(options(t))} {
		s := start(t, r, "python")
		st := s.(code.Stager)
		staged, err := st.Stage(ctx, []code.Input{
			{Name: "sales.csv", Data: []byte("region,amount\neu,3\nus,4\n")},
			{Name: "../notes.txt", Data: []byte("hello")},
		})
		if err != nil {
			t.Fatal(err)
		}
		work := dirOf(t, s)
		if staged[0].Path != filepath.Join(work, "inputs", "sales.csv") || staged[0].Bytes != 24 ||
			staged[1].Path != filepath.Join(work, "inputs", "%2E.%2Fnotes.txt") {
			t.Fatalf("%s staged %+v", r.ID(), staged)
		}
		out := mustOK(t, s, `import os, json
m = json.loads(os.environ["AGENTRY_INPUTS"])
print(sorted(m), sum(int(l.split(",")[1]) for l in open(m["sales.csv"]).read().splitlines()[1:]), open(m["../notes.txt"]).read())`)
		if out != "['../notes.txt', 'sales.csv'] 7 hello\n" {
			t.Fatalf("%s: %q", r.ID(), out)
		}
		// Later staging adds to the map; the same name replaces its file.
		if _, err := st.Stage(ctx, []code.Input{{Name: "sales.csv", Data: []byte("x")}, {Name: "more", Data: nil}}); err != nil {
			t.Fatal(err)
		}
		out = mustOK(t, s, `import os, json
m = json.loads(os.environ["AGENTRY_INPUTS"])
print(len(m), open(m["sales.csv"]).read())`)
		if out != "3 x\n" {
			t.Fatalf("%s after restaging: %q", r.ID(), out)
		}
		var env map[string]string
		_ = json.Unmarshal([]byte(mustOK(t, s, `import os; print(os.environ["AGENTRY_INPUTS"])`)), &env)
		if len(env) != 3 {
			t.Fatalf("%s: AGENTRY_INPUTS %v", r.ID(), env)
		}
	}
}

func TestStagingRefusesBadInputs(t *testing.T) {
	t.Parallel()
	s := start(t, local.New(options(t)), "python")
	st := s.(code.Stager)
	if _, err := st.Stage(context.Background(), []code.Input{{Name: ""}}); err == nil || !strings.Contains(err.Error(), "no name") {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := st.Stage(context.Background(), []code.Input{{Name: "a"}, {Name: "a"}}); err == nil || !strings.Contains(err.Error(), "distinct") {
		t.Fatalf("repeated name: %v", err)
	}
}

// The work directory belongs to the code. A symlink it plants must not
// turn the host's next staging into a write outside the session.
func TestStagingCannotBeRedirectedBySymlinks(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	s := start(t, local.New(options(t)), "python")
	st := s.(code.Stager)
	if _, err := st.Stage(context.Background(), []code.Input{{Name: "first", Data: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	mustOK(t, s, "import os, shutil\nshutil.rmtree('inputs')\nos.symlink("+quote(outside)+", 'inputs')")
	_, err := st.Stage(context.Background(), []code.Input{{Name: "planted", Data: []byte("host write")}})
	if err == nil {
		t.Fatal("staging through a planted symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging wrote outside the session: %v", err)
	}
	// A symlinked file inside inputs is no way out either.
	mustOK(t, s, "import os\nos.remove('inputs')\nos.mkdir('inputs')\nos.symlink("+quote(filepath.Join(outside, "victim"))+", 'inputs/victim')")
	if _, err := st.Stage(context.Background(), []code.Input{{Name: "victim", Data: []byte("host write")}}); err == nil {
		t.Fatal("staging followed a planted file symlink")
	}
	if _, err := os.Stat(filepath.Join(outside, "victim")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging wrote through a symlink: %v", err)
	}
}

// A session removes its directory even when the code took the permissions
// off, and a symlink planted in it does not turn the cleanup onto the host.
func TestStopCleansUpWhatTheCodeLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.Mkdir(victim, 0o500); err != nil {
		t.Fatal(err)
	}
	s, err := local.New(options(t)).Start(ctx, code.StartRequest{Key: "k", Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	dir := dirOf(t, s)
	mustOK(t, s, "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0)\nos.symlink("+quote(victim)+", 'link')")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the session directory survived: %v", err)
	}
	fi, err := os.Stat(victim)
	if err != nil || fi.Mode().Perm() != 0o500 {
		t.Fatalf("cleanup touched a host directory through a symlink: %v %v", fi.Mode(), err)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
