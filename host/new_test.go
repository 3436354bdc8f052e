package host_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// New is a sequence of steps sharing one cleanup stack: a step that fails
// gives back what the steps before it took. A router whose host failed to
// build is free for the next host, and the bus a failed host made for
// itself is closed.
func TestNewGivesBackWhatAFailedBuildTook(t *testing.T) {
	f := newFixture(t, config{})
	inst, err := f.reg.Instance("agents")
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, filepath.Join(t.TempDir(), "x.db"))
	defer st.Close()
	auth, _ := tokensFor(t, nil)
	r := host.NewEventSink()
	// The lent tools are checked after the router is taken.
	_, err = host.New(host.Options{Adapter: inst.Adapter(), Store: st, Auth: auth, EventSink: r, EvictEvery: -1, RetentionEvery: -1, HostTools: []tool.Tool{nil}})
	if err == nil || !strings.Contains(err.Error(), "HostTools[0] is nil") {
		t.Fatalf("a nil lent tool: %v", err)
	}
	// So are the replicas: a Leases naming no replica is refused.
	_, err = host.New(host.Options{Adapter: inst.Adapter(), Store: st, Auth: auth, EventSink: r, EvictEvery: -1, RetentionEvery: -1, Leases: noName{}})
	if err == nil || !strings.Contains(err.Error(), "names no replica id") {
		t.Fatalf("leases naming no replica: %v", err)
	}
	h, err := host.New(host.Options{Adapter: inst.Adapter(), Store: st, Auth: auth, EventSink: r, EvictEvery: -1, RetentionEvery: -1})
	if err != nil {
		t.Fatalf("the router of a host that failed to build is still taken: %v", err)
	}
	_ = h
}

// noName is Leases that names no replica.
type noName struct{ host.OneReplica }

func (noName) Replica() host.Replica { return host.Replica{} }
