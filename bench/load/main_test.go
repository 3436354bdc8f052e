package main

import (
	"bytes"
	"context"
	"os"
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
	dsn := os.Getenv("AGENTRY_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("AGENTRY_TEST_POSTGRES is unset under CI=true: run .ci/postgres and export the DSN it prints")
		}
		t.Skip("SKIPPING: replicas need PostgreSQL and AGENTRY_TEST_POSTGRES is unset")
	}
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
