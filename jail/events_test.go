package jail_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/jail"
)

// The jail's events, written to an events file and read back, decode into
// their own payload structs: the jail registered them with package event.
func TestEventsReadBackFromAFile(t *testing.T) {
	code := 3
	sent := []event.Event{
		{Type: jail.TypeStarted, Payload: &jail.Started{Label: "abc", UID: 65534, Applied: "namespaces,seccomp", NotApplied: "disk", AllowHosts: "a:1", Exposed: "host-tools", StartMs: 21.5}},
		{Type: jail.TypeRefused, Payload: &jail.Refused{Label: "abc", Target: "127.0.0.1:9", Via: "direct", Reason: "closed", Suppressed: 4}},
		{Type: jail.TypeStopped, Payload: &jail.Stopped{Label: "abc", How: "exited", ExitCode: &code, TookMs: 1.5, Error: "x"}},
		{Type: jail.TypeRunnerLimits, Payload: &jail.RunnerLimits{RunnerID: "r", Description: "d", Applied: []string{"a"}, NotApplied: []jail.Gap{{Limit: "disk cap", Why: "no root"}}}},
		{Type: jail.TypeRunnerSwept, Payload: &jail.RunnerSwept{RunnerID: "agent-jail", What: "cgroups", Removed: 2, Owners: []int{7}, Failed: 1, Error: "busy"}},
	}
	path := filepath.Join(t.TempDir(), "events.ndjson")
	sink, err := ndjson.Open(path, ndjson.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range sent {
		sent[i].Meta = event.Meta{Seq: uint64(i + 1), Time: at}
		sink.Export(sent[i])
	}
	if err := sink.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	if _, err := ndjson.ScanFile(path, func(e event.Event) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sent) {
		t.Fatalf("read back\n%#v\nwant\n%#v", got, sent)
	}
	for _, e := range sent {
		if reflect.TypeOf(event.NewPayload(e.Type)) != reflect.TypeOf(e.Payload) {
			t.Errorf("NewPayload(%s) is %T", e.Type, event.NewPayload(e.Type))
		}
	}
}
