package main

import (
	"bytes"
	"context"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"regexp"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A small run against the in-process host answers every turn and reports
// what the README quotes.
func TestLoadReports(t *testing.T) {
	var out bytes.Buffer
	c := config{message: "hello", sessions: 8, turns: 5, principals: 2, maxDuration: time.Minute, baseline: true}
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, re := range []string{
		`turns: 40 answered in \S+: \d+ turns/s`,
		`latency: p50 \S+\s+p90 \S+\s+p99 \S+\s+max \S+`,
		`memory \(RSS of the host's process tree\): .* MB per session`,
		`baseline \(a bare net/http JSON handler.*\): \d+ requests/s`,
		`host / baseline: \d+\.\d+× the throughput`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("the report lacks %s:\n%s", re, out.String())
		}
	}
	if bytes.Contains(out.Bytes(), []byte("failures:")) {
		t.Fatalf("turns failed:\n%s", out.String())
	}
}

// The interpreter mode holds one live interpreter per session, and closes
// them all at the end.
func TestLoadInterpreterMode(t *testing.T) {
	var out bytes.Buffer
	c := config{mode: "interpreter", sessions: 3, turns: 2, principals: 1, maxDuration: time.Minute}
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, re := range []string{
		`turns: 6 answered`,
		`live tool sessions while held: 3`,
		`holding 3 sessions \(4 processes\)`,
		`after closing them: .* \(1 processes\)`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("the report lacks %s:\n%s", re, out.String())
		}
	}
}

// Three replicas in process on one PostgreSQL: every turn is answered,
// two in three of them forwarded to the session's holder, and the report
// sets forwarded turns against direct ones.
func TestLoadAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t) // a schema of its own, so no earlier run's tables are in the way
	var out bytes.Buffer
	c := config{message: "hello", sessions: 6, turns: 6, principals: 2, replicas: 3, store: dsn, maxDuration: time.Minute}
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, re := range []string{
		`replicas: 3 in this process`,
		`turns: 36 answered`,
		`direct turns \(on the holder\): 12, .*; forwarded turns: 24, `,
		`forwarded / direct: \d+\.\d+× the p50 latency`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("the report lacks %s:\n%s", re, out.String())
		}
	}
	if bytes.Contains(out.Bytes(), []byte("failures:")) {
		t.Fatalf("turns failed:\n%s", out.String())
	}
}
