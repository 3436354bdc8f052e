package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/event"
)

// The story's key lines: each user's session, state kept between calls,
// isolation between users, the pause with the session alive, the same
// state after the resume, and each way a session closes.
var storyLines = []string{
	"1. Two users, one code session each",
	"reused (call 2)",
	"◂ 49",
	`answer: "The total is 49."`,
	"◂ False",
	"⏸ paused, run run-",
	"2 tool sessions are live",
	"alice approves; the same run resumes",
	`◂ sent to finance: "the total is 49"`,
	"reused (call 4)",
	"◂ 98",
	"after the resume:",
	"closed: session-end",
	"(closed 1 session; bob's is untouched: 1 live)",
	"closed: idle, held 16m",
	"closed: shutdown, held 2m0s",
	"(3 sessions opened, 3 closed, 0 failed to close; 0 still live)",
	"3 opened, 3 reused, closed by idle 1, session-end 1, shutdown 1; 0 failed to close, 0 still open",
	"verdict: zero leaks",
}

func checkStory(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range append(storyLines, want...) {
		if !strings.Contains(out, w) {
			t.Errorf("the story lacks %q", w)
		}
	}
	if strings.Contains(out, "t=acme") || strings.Contains(out, "p=alice") {
		t.Error("the story printed a raw isolation key")
	}
	if t.Failed() {
		t.Logf("the story:\n%s", out)
	}
}

func TestDemoTellsTheWholeStory(t *testing.T) {
	needPython(t)
	events := filepath.Join(t.TempDir(), "demo.ndjson")
	out, errout, err := cli(t, context.Background(), "", "demo", "--events", events)
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errout)
	}
	where := "UNJAILED: bubblewrap cannot build a jail here"
	if jailWorks() {
		where = "jailed with bubblewrap"
	}
	checkStory(t, out, "one persistent Python interpreter per conversation", where, "events: "+events)
	r := auditClean(t, events, 3)
	if len(r.FailedCloses) != 0 || r.UnmatchedCloses != 0 {
		t.Fatalf("report %+v", r)
	}
	// Every turn's events carry the identity it was given.
	for _, e := range readEvents(t, events) {
		if e.Type == event.TypeTurnStart && (e.Meta.Tenant != "acme" || e.Meta.Principal == "") {
			t.Fatalf("turn_start meta %+v", e.Meta)
		}
	}
}

// Without --events the demo writes into a new temporary directory and
// says where.
func TestDemoDefaultEventsFile(t *testing.T) {
	needPython(t)
	out, _, err := cli(t, context.Background(), "", "demo")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`events: (\S+events\.ndjson)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the story does not say where the events are:\n%s", out)
	}
	defer os.RemoveAll(filepath.Dir(m[1]))
	if !strings.HasPrefix(filepath.Base(filepath.Dir(m[1])), "agentry-demo-") {
		t.Fatalf("events file %s is not in a new temporary directory", m[1])
	}
	auditClean(t, m[1], 3)
}

// A fresh machine without bubblewrap: the demo runs its own code
// unjailed, says so, and still tells the whole story.
func TestDemoWithoutBubblewrap(t *testing.T) {
	needPython(t)
	events := filepath.Join(t.TempDir(), "demo.ndjson")
	o := demoOptions{bwrap: "/nonexistent/bwrap"}
	o.sinks.events = events
	var out, errout syncBuffer
	if err := runDemo(context.Background(), o, &out, &errout); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkStory(t, out.String(), "UNJAILED: bubblewrap cannot build a jail here", "apt-get install bubblewrap",
		"runner local-interpreter)")
	auditClean(t, events, 3)
}

// Without python3 at all: sh in a process per call, said so, same story
// (the state between calls is a file).
func TestDemoWithoutPython(t *testing.T) {
	events := filepath.Join(t.TempDir(), "demo.ndjson")
	o := demoOptions{python: "/nonexistent/python3"}
	o.sinks.events = events
	var out, errout syncBuffer
	if err := runDemo(context.Background(), o, &out, &errout); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkStory(t, out.String(), "python3 is missing, so the tour runs sh", "the file prices.txt was set", "alice's prices.txt is not there", "same working directory")
	auditClean(t, events, 3)
}
