package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/agentry-dev/agentry/event/audit"
)

// replica is one `agentry serve` of the test, with its events file and
// its TMPDIR (where its interpreters' sandboxes live).
type replica struct {
	*process
	events, tmp string
}

// appendAndCount is model code with a side effect: it appends one line
// to side.txt in the conversation's sandbox and prints how many lines
// the file has.
const appendAndCount = "with open('side.txt', 'a') as f:\n    f.write('once\\n')\nprint('lines', len(open('side.txt').read().splitlines()))"

// Three `agentry serve` processes on one PostgreSQL: any replica answers
// with the conversation's live state (the interpreter's variable set
// through A is read through B and C, which forward to A), streams come
// through, a second turn is refused across replicas, and when A is killed
// with SIGKILL the next request on B takes the conversation over within
// the lease — the model told, no earlier turn run again, the side effect
// of each turn made exactly once. The survivors' event files audit clean.
func TestReplicasBinary(t *testing.T) {
	needPython(t)
	dsn := pgtest.DSN(t)
	bin := binary(t)
	dir := t.TempDir()
	tokens, toks := writeTokens(t, "alice")
	tok := toks["alice"]
	runner := "interpreter"
	if jailWorks() {
		runner = "jail"
	}
	// Long enough that a renewal late under a loaded CI machine (every third
	// of it) does not lapse, short enough for a quick takeover.
	const lease = 5 * time.Second
	// The sandboxes' parent must be reachable by the jail's own user
	// (t.TempDir's parent is root's alone).
	tmp, err := os.MkdirTemp("", "agentry-replicas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	var rs []*replica
	for _, name := range []string{"a", "b", "c"} {
		r := &replica{events: filepath.Join(dir, name+".ndjson"), tmp: filepath.Join(tmp, name)}
		if err := os.Mkdir(r.tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		r.process = startServeBinary(t, bin, []string{"TMPDIR=" + r.tmp}, "--store", dsn, "--tokens", tokens, "--events", r.events,
			"--runner", runner, "--model", "scripted", "--lease", lease.String(), "--drain", "20s")
		r.token = tok
		rs = append(rs, r)
	}
	a, b, c := rs[0], rs[1], rs[2]

	code, body := a.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	turns := "/v1/sessions/" + s.SessionID + "/turns"
	output := func(r *replica, src string) string {
		t.Helper()
		code, body := r.call(t, "POST", turns, turnBody(src))
		if code != 200 {
			t.Fatalf("turn through %s: %d %s\n%s", r.url, code, body, r.stderr)
		}
		var out struct{ Output string }
		_ = json.Unmarshal(body, &out)
		return withoutArtifacts(out.Output)
	}

	if out := output(a, "x = 41\n"+appendAndCount); out != "lines 1" {
		t.Fatalf("turn 1 on A: %q", out)
	}
	if out := output(b, "print(x + 1)\n"+appendAndCount); out != "42\nlines 2" {
		t.Fatalf("turn 2 through B: %q", out)
	}
	// Streams through C, forwarded to A, arrive whole: a few without side
	// effects, then one that appends.
	stream := func(src string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", c.url+turns, strings.NewReader(turnBody(src)))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		last, err := sseLast(res)
		if err != nil {
			t.Fatalf("reading the stream through C: %v\nC: %s\nA: %s", err, c.stderr, a.stderr)
		}
		return last
	}
	for i := range 3 {
		if last := stream(fmt.Sprintf("print(x * %d)", i)); !strings.Contains(last, fmt.Sprintf(`"output":"%d`, 41*i)) {
			t.Fatalf("stream %d through C ended with %s", i, last)
		}
	}
	if last := stream("print(x + 2)\n" + appendAndCount); !strings.Contains(last, `"output":"43\nlines 3\n[artifact: side.txt`) {
		t.Fatalf("the stream through C ended with %s", last)
	}

	// One turn at a time across replicas: a turn on A waits inside the
	// interpreter for a file the test makes; meanwhile B and C get 409.
	req, _ := http.NewRequest("POST", a.url+turns, strings.NewReader(turnBody("import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.01)\nprint('went')")))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && sc.Text() != "event: agentry.tool.start" {
	}
	for _, r := range []*replica{b, c} {
		if code, body := r.call(t, "POST", turns, turnBody("print(1)")); code != http.StatusConflict || !strings.Contains(string(body), `"session_busy"`) {
			t.Fatalf("a second turn through %s while A runs one: %d %s", r.url, code, body)
		}
	}
	side := sideFiles(t, a.tmp)
	if len(side) != 1 {
		t.Fatalf("A's sandboxes hold %d side.txt files: %v", len(side), side)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(side[0]), "go"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	var lastLine string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			lastLine = d
		}
	}
	res.Body.Close()
	if !strings.Contains(lastLine, `"output":"went`) {
		t.Fatalf("the gated turn: %s", lastLine)
	}

	// SIGKILL A between turns: B answers 503 with Retry-After until A's
	// lease lapses, then takes over.
	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.wait()
	var out string
	for {
		code, body := b.call(t, "POST", turns, turnBody("try:\n    print(x)\nexcept NameError:\n    print('x is gone')\n"+appendAndCount))
		if code == 200 {
			var o struct{ Output string }
			_ = json.Unmarshal(body, &o)
			out = withoutArtifacts(o.Output)
			break
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"replica_unavailable"`) {
			t.Fatalf("through B after A died: %d %s", code, body)
		}
		if time.Since(killed) > 3*lease {
			t.Fatalf("B did not take over within %s of A's death", 3*lease)
		}
		time.Sleep(time.Second) // the Retry-After it was given (whole seconds; at most the lease left)
	}
	took := time.Since(killed)
	if took > lease+2*time.Second {
		t.Fatalf("the takeover took %s, more than the %s lease", took, lease)
	}
	t.Logf("B took the conversation over %s after A was killed (lease %s)", took.Round(time.Millisecond), lease)
	if out != "x is gone\nlines 1" {
		t.Fatalf("the first turn after the takeover: %q (want the variable gone and a fresh sandbox: no earlier turn ran again)", out)
	}
	if out := output(c, appendAndCount); out != "lines 2" {
		t.Fatalf("through C after the takeover: %q", out)
	}
	// Exactly once: A's sandbox saw its three appends, no more.
	if side := sideFiles(t, a.tmp); len(side) != 1 || countLines(t, side[0]) != 3 {
		t.Fatalf("A's side effects: %v", side)
	}
	// The model was told; the turn log says what happened.
	code, body = c.call(t, "GET", "/v1/sessions/"+s.SessionID+"/turns", "")
	if code != 200 || strings.Count(string(body), `"kind":"takeover"`) != 1 || !strings.Contains(string(body), "live state") {
		t.Fatalf("the turn log: %d %s", code, body)
	}
	if n := nativeNotes(t, dsn); n != 1 {
		t.Fatalf("the model was told of the takeover %d times, want once", n)
	}

	// The survivors drain; their events files audit clean. A's file ends
	// wherever SIGKILL cut it: the audit reports the sessions A held as
	// still open (its interpreters died with it), and no failed close.
	for _, r := range []*replica{b, c} {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := r.wait(); err != nil {
			t.Fatalf("%s: %v\n%s", r.url, err, r.stderr)
		}
	}
	rb := auditClean(t, b.events, 1) // B opened the one interpreter of the takeover
	auditClean(t, c.events, 0)       // C only forwarded
	if rb.Tools[0].Closed["shutdown"] != 1 {
		t.Fatalf("B's interpreter: %+v", rb.Tools[0])
	}
	ra := audit.Audit([]string{a.events})
	if len(ra.FailedCloses) != 0 || len(ra.Open) > 1 {
		b, _ := json.MarshalIndent(ra, "", "  ")
		t.Fatalf("the killed replica's events: %s", b)
	}
}

// withoutArtifacts drops the lines the code tool adds about the files a
// run changed.
func withoutArtifacts(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "[artifact: ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// sseLast reads a stream to its end and returns its last data line, or
// the error that ended it.
func sseLast(res *http.Response) (string, error) {
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return "", fmt.Errorf("stream: status %d", res.StatusCode)
	}
	var last string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	return last, sc.Err()
}

func lastSSEData(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("stream: status %d", res.StatusCode)
	}
	var last string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return last
}

// sideFiles finds the side.txt files in the sandboxes under root.
func sideFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "side.txt" {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// nativeNotes counts the takeover notes in the model's transcripts, as
// the native provider stored them.
func nativeNotes(t *testing.T, dsn string) int {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT message FROM agentry_native_messages`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var rec string
		if err := rows.Scan(&rec); err != nil {
			t.Fatal(err)
		}
		n += strings.Count(rec, strconv.Quote("[agentry: this conversation was taken over")[1:20])
	}
	return n
}
