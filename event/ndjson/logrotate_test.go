package ndjson_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentry-dev/agentry/event/ndjson"
)

// TestLogrotateCopytruncateUnderABusyWriter is the documented recipe, run
// with Debian's real logrotate: copytruncate rotating the file while
// events pour in. Every line in every generation must be a whole event, no
// file may start with a hole of NUL bytes, and no event may appear twice.
// (copytruncate loses what lands between its copy and its truncate; that
// is logrotate's documented window, and the log says how much.)
func TestLogrotateCopytruncateUnderABusyWriter(t *testing.T) {
	t.Parallel()
	testLogrotate(t, copytruncateRecipe, false)
}

// TestLogrotateRenameUnderABusyWriter is the lossless recipe: logrotate
// renames the file and creates a new one; the sink notices at its next
// batch and continues there. Every event written is in exactly one file.
func TestLogrotateRenameUnderABusyWriter(t *testing.T) {
	t.Parallel()
	testLogrotate(t, renameRecipe, true)
}

func testLogrotate(t *testing.T, recipeFormat string, lossless bool) {
	bin, err := exec.LookPath("logrotate")
	if err != nil {
		for _, p := range []string{"/usr/sbin/logrotate", "/sbin/logrotate"} {
			if _, serr := os.Stat(p); serr == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		unavailable(t, "logrotate is not installed (apt-get install logrotate); the logrotate recipes are untested")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	conf := filepath.Join(dir, "logrotate.conf")
	recipe := fmt.Sprintf(recipeFormat, path)
	if err := os.WriteFile(conf, []byte(recipe), 0o600); err != nil {
		t.Fatal(err)
	}
	var heard errs
	s := open(t, path, ndjson.Options{MaxBufferEvents: 20, OnError: heard.add})

	var exported atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			s.Export(fixed(seq))
			exported.Store(seq)
		}
	})
	const rotations = 8
	for i := range rotations {
		// Let the writer put something on disk first.
		before := s.Stats().Written
		for s.Stats().Written < before+500 {
			// A producer this eager can outrun the writer while logrotate
			// holds the file; those drops are reported and are not what
			// this test is about.
			if err := s.Flush(context.Background()); err != nil && !errors.Is(err, ndjson.ErrWriterBehind) {
				t.Fatal(err)
			}
		}
		out, err := exec.Command(bin, "--force", "--state", filepath.Join(dir, "state"), conf).CombinedOutput()
		if err != nil {
			t.Fatalf("logrotate run %d: %v\n%s", i+1, err, out)
		}
	}
	close(stop)
	wg.Wait()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, err := range heard.all() {
		if !errors.Is(err, ndjson.ErrWriterBehind) {
			t.Fatalf("the sink reported %v", err)
		}
	}

	files, _ := filepath.Glob(path + "*")
	seen := map[uint64]bool{}
	generations := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f != path && !strings.HasPrefix(f, path+".") {
			continue
		}
		generations++
		if i := bytes.IndexByte(data, 0); i >= 0 {
			t.Fatalf("%s holds a NUL byte at offset %d: the writer left a hole", filepath.Base(f), i)
		}
		for _, e := range decoded(t, f) {
			if seen[e.Meta.Seq] {
				t.Fatalf("seq %d appears twice", e.Meta.Seq)
			}
			seen[e.Meta.Seq] = true
		}
	}
	if generations != rotations+1 {
		t.Fatalf("%d files, want the live one and %d rotated copies: %v", generations, rotations, files)
	}
	var seqs []uint64
	for q := range seen {
		seqs = append(seqs, q)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	written := s.Stats().Written
	t.Logf("%d events written, %d found across %d files (copytruncate loses what lands between its copy and its truncate: %d); %d dropped with the writer behind",
		written, len(seen), generations, written-uint64(len(seen)), s.Stats().Dropped)
	if uint64(len(seen)) > written || len(seen) == 0 || lossless && uint64(len(seen)) != written {
		t.Fatalf("%d events found, %d written", len(seen), written)
	}
}

// The two configurations docs/events.md gives, with the path left open.
const (
	copytruncateRecipe = `%s {
    copytruncate
    rotate 100
    missingok
    notifempty
    nocompress
}
`
	renameRecipe = `%s {
    create 0640
    rotate 100
    missingok
    notifempty
    nocompress
}
`
)
