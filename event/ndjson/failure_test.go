package ndjson_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event/ndjson"
)

// /dev/full accepts the open and fails every write with ENOSPC: a disk
// that is full, for real, without root.
func TestAFullDiskReportsDroppedEvents(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/full"); err != nil {
		unavailable(t, "no /dev/full on this system")
	}
	var heard errs
	s := open(t, "/dev/full", ndjson.Options{OnError: heard.add, FlushInterval: -1})
	for i := range uint64(7) {
		s.Export(toolEnd(i, "t"))
	}
	err := s.Flush(context.Background())
	var de *ndjson.DropError
	if !errors.As(err, &de) || de.N != 7 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush = %v, want 7 events dropped for ENOSPC", err)
	}
	want := "7 events dropped writing to /dev/full: write /dev/full: no space left on device"
	if got := heard.text(); got != want+"\n" {
		t.Fatalf("OnError heard %q, want %q", got, want)
	}
	if st := s.Stats(); st.Dropped != 7 || st.Written != 0 || st.Accepted != 7 {
		t.Fatalf("stats %+v", st)
	}
}

// A writer stuck on a pipe nobody reads is the slowest disk there is. The
// exporters must not notice: Export keeps returning, memory stays within
// the bound, the overflow is dropped and reported, and Flush gives up at
// its deadline.
func TestAStuckWriterNeverBlocksExportAndMemoryStaysBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "events.pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		unavailable(t, "cannot make a FIFO here: %v", err)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const bound = 256 << 10
	var heard errs
	s, err := ndjson.Open(fifo, ndjson.Options{OnError: heard.add, MaxQueuedBytes: bound, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 100_000 // ≈ 20 MB of lines: far past the pipe and the bound
	start := time.Now()
	for i := range uint64(n) {
		s.Export(toolEnd(i, "stuck"))
	}
	took := time.Since(start)
	runtime.ReadMemStats(&after)

	st := s.Stats()
	if st.Dropped == 0 || st.Accepted+st.Dropped != n {
		t.Fatalf("stats %+v: with the writer stuck, the overflow must be dropped", st)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 4*bound+(4<<20) {
		t.Fatalf("the heap grew by %d bytes with the writer stuck; the bound is %d", grew, bound)
	}
	t.Logf("%d exports in %s with the writer stuck: %d accepted, %d dropped", n, took, st.Accepted, st.Dropped)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = s.Flush(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with a stuck writer = %v, want it to give up at its deadline", err)
	}
	// The overflow report does not wait for the stuck writer.
	for !strings.Contains(heard.text(), "the writer is behind") {
		runtime.Gosched()
	}
	if !strings.Contains(heard.text(), "events dropped writing to "+fifo) {
		t.Fatalf("OnError heard %q", heard.text())
	}

	// Unstick it: read the pipe to the end, which comes when Close closes
	// the writer's side.
	drained := make(chan int64)
	go func() {
		n, _ := io.Copy(io.Discard, r)
		drained <- n
	}()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-drained; got != int64(s.Stats().Bytes) {
		t.Fatalf("the reader got %d bytes, the sink wrote %d", got, s.Stats().Bytes)
	}
	if st := s.Stats(); st.Written != st.Accepted {
		t.Fatalf("after Close: %+v; everything accepted should be written", st)
	}
}

// unavailable ends a test that needs what this machine lacks: it skips,
// saying so, or fails under CI=true, where a skip would hide an untested
// promise.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true runs every test (.ci/run installs and runs as root what they need)", msg)
	}
	t.Skipf("SKIPPED: %s", msg)
}

// mountTmpfs mounts a tmpfs at dir for the test, or skips loudly (fails
// under CI=true) when this process may not mount (not root).
func mountTmpfs(t *testing.T, dir string, flags uintptr, data string) {
	t.Helper()
	if err := syscall.Mount("agentry-test", dir, "tmpfs", flags, data); err != nil {
		unavailable(t, "cannot mount a tmpfs here (%v); run as root to test a full or read-only filesystem", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
}

// A tmpfs of 32 KiB fills for real. Writes that fail are reported, and
// the file never ends in half a line: a partial batch is taken back.
func TestARealFullFilesystem(t *testing.T) {
	dir := t.TempDir()
	mountTmpfs(t, dir, 0, "size=32k")
	path := filepath.Join(dir, "events.ndjson")
	var heard errs
	s := open(t, path, ndjson.Options{OnError: heard.add, MaxBufferEvents: 1000, FlushInterval: -1})
	for i := range uint64(1000) {
		s.Export(toolEnd(i, strings.Repeat("z", 90)))
		// Batches of 13 (≈ 2.5 KB), so that some fit before the disk is
		// full: left to the size trigger, a writer slower than this loop
		// (under -race) can take all 1,000 events as one batch.
		if i%13 == 12 {
			if err := s.Flush(context.Background()); err != nil && !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
		}
	}
	err := s.Close(context.Background())
	if err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Dropped == 0 || st.Written == 0 || st.Written+st.Dropped != 1000 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(heard.text(), "events dropped writing to "+path) || !strings.Contains(heard.text(), "no space left on device") {
		t.Fatalf("OnError heard %q", heard.text())
	}
	if evs := decoded(t, path); uint64(len(evs)) != st.Written {
		t.Fatalf("%d whole events on disk, %d counted written", len(evs), st.Written)
	}
}

// The same with the sink rotating and a burst split across generations:
// a write that fails partway drops the rest of its batch, counted and
// reported; whatever was written stays whole lines, within the bound.
func TestARealFullFilesystemWhileRotating(t *testing.T) {
	dir := t.TempDir()
	mountTmpfs(t, dir, 0, "size=32k")
	path := filepath.Join(dir, "events.ndjson")
	const ceiling = 20 << 10 // .1 and a full file do not fit in 32k
	var heard errs
	s := open(t, path, ndjson.Options{MaxBytes: ceiling, OnError: heard.add, MaxBufferEvents: 1000, FlushInterval: -1})
	for i := range uint64(1000) {
		s.Export(toolEnd(i, strings.Repeat("z", 90)))
		// Batches of 50 (≈ 10 KB): a write that crosses the ceiling is split,
		// and none is larger than two generations.
		if i%50 == 49 {
			if err := s.Flush(context.Background()); err != nil && !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
		}
	}
	err := s.Close(context.Background())
	if err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Dropped == 0 || st.Written == 0 || st.Written+st.Dropped != 1000 || st.Rotations == 0 || st.RotatedAway != 0 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(heard.text(), "events dropped writing to "+path) || !strings.Contains(heard.text(), "no space left on device") {
		t.Fatalf("OnError heard %q", heard.text())
	}
	for _, p := range []string{path, path + ".1"} {
		decoded(t, p)
		assertBound(t, p, ceiling)
	}
}

// A read-only filesystem: refused at Open; and mid-run, when a read-only
// mount lands over the directory, the next batches are dropped and
// reported.
func TestAReadOnlyFilesystem(t *testing.T) {
	ro := t.TempDir()
	mountTmpfs(t, ro, syscall.MS_RDONLY, "size=64k")
	path := filepath.Join(ro, "logs", "events.ndjson")
	_, err := ndjson.Open(path, ndjson.Options{})
	assertRefusal(t, err, path, ndjson.ProblemReadOnly)

	dir := t.TempDir()
	mountTmpfs(t, dir, 0, "size=1m")
	path = filepath.Join(dir, "events.ndjson")
	var heard errs
	s := open(t, path, ndjson.Options{OnError: heard.add, FlushInterval: -1})
	s.Export(toolEnd(1, "t"))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, dir, syscall.MS_RDONLY, "size=64k") // over the first
	s.Export(toolEnd(2, "t"))
	s.Export(toolEnd(3, "t"))
	err = s.Flush(context.Background())
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("Flush = %v, want EROFS", err)
	}
	if want := "2 events dropped writing to " + path; !strings.Contains(heard.text(), want) || !strings.Contains(heard.text(), "read-only file system") {
		t.Fatalf("OnError heard %q, want %q", heard.text(), want)
	}
}

func TestOpenRefusesWithoutPermission(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "logs", "events.ndjson")
	var err error
	asUnprivileged(t, func() { _, err = ndjson.Open(path, ndjson.Options{}) })
	assertRefusal(t, err, path, ndjson.ProblemPermission)
}

// asUnprivileged runs f with the filesystem identity of an ordinary user.
// As root it switches the filesystem uid of one locked OS thread to
// nobody (which also drops the capability to override permissions), runs
// f there, and lets the thread die with its goroutine.
func asUnprivileged(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		syscall.RawSyscall(syscall.SYS_SETFSUID, 65534, 0, 0)
		if cur, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0); cur != 65534 {
			t.Errorf("could not take the identity of nobody (fsuid %d)", cur)
			return
		}
		f()
	}()
	<-done
}

// A process killed with SIGKILL loses what was buffered and nothing that
// was flushed, and leaves no partial line behind.
func TestAHardKillLosesAtMostTheBuffer(t *testing.T) {
	if path := os.Getenv("AGENTRY_NDJSON_KILL_ME"); path != "" {
		s, err := ndjson.Open(path, ndjson.Options{FlushInterval: -1, MaxBufferEvents: 1000})
		if err != nil {
			os.Exit(3)
		}
		for i := range uint64(50) {
			s.Export(toolEnd(i, "flushed"))
		}
		if err := s.Flush(context.Background()); err != nil {
			os.Exit(4)
		}
		for i := range uint64(30) {
			s.Export(toolEnd(50+i, "buffered"))
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAHardKillLosesAtMostTheBuffer$")
	cmd.Env = append(os.Environ(), "AGENTRY_NDJSON_KILL_ME="+path)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, want SIGKILL", err)
	}
	evs := decoded(t, path)
	if len(evs) != 50 {
		t.Fatalf("%d events survived the kill, want the 50 flushed ones", len(evs))
	}
}
