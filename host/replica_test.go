package host_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// pgDSN is a fresh PostgreSQL schema for a replica test; replicas need a
// shared store, so there is no SQLite half. Under CI=true a missing
// server fails.
func pgDSN(t *testing.T) string {
	t.Helper()
	pg := os.Getenv("AGENTRY_TEST_POSTGRES")
	if pg == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("AGENTRY_TEST_POSTGRES is unset under CI=true: run .ci/postgres and export the DSN it prints")
		}
		t.Skip("SKIPPING: replicas need PostgreSQL and AGENTRY_TEST_POSTGRES is unset (run .ci/postgres to get a DSN)")
	}
	return pgtest.Schema(t, pg)
}

// flaky are leases whose renewals can be made to fail, as when a replica
// loses the store (or hangs): its leases lapse while it still runs.
type flaky struct {
	*sqlstore.Leases
	cut atomic.Bool
}

func (l *flaky) Renew(ctx context.Context, ids []string) ([]string, error) {
	if l.cut.Load() {
		return nil, errors.New("the store cannot be reached")
	}
	return l.Leases.Renew(ctx, ids)
}

const (
	testLease   = 600 * time.Millisecond
	testForward = 900 * time.Millisecond
)

// door stands in front of a replica's HTTP handler: shut, every request
// (its health check too) waits behind it, as at a replica that is frozen
// (SIGSTOP) or cut off while its process, and its leases, live on. It
// tells of each health check it lets through.
type door struct {
	next    http.Handler
	mu      sync.Mutex
	shut    chan struct{} // nil while open
	healthy chan struct{}
}

func (d *door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	shut := d.shut
	d.mu.Unlock()
	if shut != nil {
		select {
		case <-shut:
		case <-r.Context().Done():
			return
		}
	}
	d.next.ServeHTTP(w, r)
	if r.URL.Path == "/healthz" {
		select {
		case d.healthy <- struct{}{}:
		default:
		}
	}
}

func (d *door) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut == nil {
		d.shut = make(chan struct{})
	}
}

func (d *door) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut != nil {
		close(d.shut)
		d.shut = nil
	}
}

// newReplica is one replica of a host on a shared PostgreSQL store, on
// a listener of its own, admitting the tokens given (nil: new ones).
func newReplica(t *testing.T, dsn string, toks map[string]string) (*fixture, *flaky) {
	t.Helper()
	return newReplicaOn(t, dsn, toks, nil)
}

// newReplicaOn is newReplica with the host's store (and the agent's
// records in it) seen through wrap.
func newReplicaOn(t *testing.T, dsn string, toks map[string]string, wrap func(*sqlstore.Store) host.Store) (*fixture, *flaky) {
	t.Helper()
	return newReplicaWith(t, dsn, toks, wrap, host.Options{})
}

// newReplicaWith is newReplicaOn with more of the host's options.
func newReplicaWith(t *testing.T, dsn string, toks map[string]string, wrap func(*sqlstore.Store) host.Store, opt host.Options) (*fixture, *flaky) {
	t.Helper()
	ws := newWorkspaces(t)
	g := newGate()
	rec := newRecorder()
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(rec, event.Filter{Tier: event.TierFull}); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, dsn)
	var hs host.Store = st
	if wrap != nil {
		hs = wrap(st)
	}
	tools := []tool.Tool{ws.filesTool(), ws.deployTool(), g.tool(ws)}
	nd, err := native.NewDriver(native.Config{TurnRunIDs: true,
		Store: native.HostStore(hs.(host.Records)),
		Agent: func(context.Context, provider.Definition) (agent.Options, error) {
			return agent.Options{ID: "replica-test", Model: cmdModel{}, Tools: tools,
				Routes: []agent.Route{{Sink: bus, Filter: event.Filter{Tier: event.TierFull}}}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := provider.OpenRegistry(context.Background(), []provider.Driver{nd}, []provider.Definition{{ID: "agents", Provider: nd.ProviderKey()}}, provider.WithEvents(bus.Export))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := reg.Instance("agents")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.Leases(context.Background(), sqlstore.LeaseOptions{Replica: host.Replica{Address: "http://" + ln.Addr().String()}, TTL: testLease})
	if err != nil {
		t.Fatal(err)
	}
	fl := &flaky{Leases: l}
	auth, toks := tokensFor(t, toks)
	opt.Provider, opt.Store, opt.Auth, opt.Bus, opt.Leases = inst, hs, auth, bus, fl
	opt.EvictEvery, opt.RetentionEvery, opt.ForwardTimeout = -1, -1, testForward
	h, err := host.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	d := &door{next: validating(t, h), healthy: make(chan struct{}, 64)}
	srv := httptest.NewUnstartedServer(d)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	f := &fixture{t: t, kind: onNative, h: h, reg: reg, bus: bus, store: st, dsn: dsn, ws: ws, gate: g, rec: rec, tokens: toks, url: srv.URL, stop: srv.Close, door: d}
	t.Cleanup(f.shutdown)
	t.Cleanup(d.open) // first: a request waiting behind it ends before the server closes
	return f, fl
}

func turnLog(t *testing.T, f *fixture, who, id string) []map[string]any {
	t.Helper()
	r := f.do("GET", "/v1/sessions/"+id+"/turns", who, nil)
	want(t, r, 200, "")
	var out []map[string]any
	for _, x := range r.json(t)["turns"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

func countKind(log []map[string]any, kind string) int {
	n := 0
	for _, e := range log {
		if e["kind"] == kind {
			n++
		}
	}
	return n
}

// Two replicas on one store: whichever a request lands on, it reaches the
// replica holding the conversation's live session — state set through A
// is read through B, streams come through, a second turn is refused
// across replicas, and a forwarded request is never forwarded again.
func TestReplicasForwardToTheHolder(t *testing.T) {
	dsn := pgDSN(t)
	a, _ := newReplica(t, dsn, nil)
	b, _ := newReplica(t, dsn, a.tokens)

	id := a.open("alice")
	want(t, a.say("alice", id, `call files {"op":"write","name":"n.txt","text":"written through A"}`), 200, "")
	// B forwards to A, which holds the workspace.
	r := b.say("alice", id, `call files {"op":"read","name":"n.txt"}`)
	want(t, r, 200, "")
	if out := r.json(t)["output"]; out != "tool said: written through A" {
		t.Fatalf("read through B: %v", out)
	}
	if _, opened, _ := b.ws.stats(); opened != 0 {
		t.Fatalf("B opened %d workspaces of its own", opened)
	}

	// Streams through B arrive whole, ending with their results: several
	// in a row, as a cut stream once showed up in about one run in twenty
	// on a loaded machine (the forwarded body was shared with the caller's
	// connection; see sendFromMemory).
	for i := range 5 {
		msg := "hello " + strconv.Itoa(i)
		res := streamTurn(t, b, "alice", id, msg)
		if len(res) == 0 || res[len(res)-1].name != host.ResultEvent || !strings.Contains(string(res[len(res)-1].data), "you said: "+msg) {
			t.Fatalf("stream %d through B: %+v", i, res)
		}
	}

	// A body of unknown length (sent chunked) is forwarded whole; one past
	// the cap is refused on B, as A would refuse it.
	r = b.do("POST", "/v1/sessions/"+id+"/turns", "alice", io.MultiReader(strings.NewReader(`{"message":`), strings.NewReader(`"chunked"}`)))
	want(t, r, 200, "")
	if out := r.json(t)["output"]; out != "you said: chunked" {
		t.Fatalf("a chunked body through B: %v", out)
	}
	want(t, b.do("POST", "/v1/sessions/"+id+"/turns", "alice", strings.Repeat(" ", host.DefaultMaxBodyBytes+1)),
		http.StatusRequestEntityTooLarge, string(host.CodeBodyTooLarge))

	// One turn at a time, across replicas: while A runs one, B's is 409.
	done := make(chan resp, 1)
	go func() { done <- a.say("alice", id, `call gate {}`) }()
	<-a.gate.entered
	want(t, b.say("alice", id, "hello"), http.StatusConflict, string(host.CodeSessionBusy))
	close(a.gate.release)
	want(t, <-done, 200, "")

	// A request that was already forwarded is answered, not sent on.
	want(t, b.do("POST", "/v1/sessions/"+id+"/turns", "alice", map[string]string{"message": "hi"}, host.ForwardedHeader, "rep-elsewhere"),
		http.StatusServiceUnavailable, string(host.CodeSessionMoved))
	// Another principal learns nothing through B.
	want(t, b.say("bob", id, "hello"), http.StatusNotFound, string(host.CodeNotFound))

	// A close through B closes A's session and frees the lease.
	want(t, b.do("DELETE", "/v1/sessions/"+id, "alice", nil), http.StatusNoContent, "")
	if open, _, closed := a.ws.stats(); open != 0 || closed != 2 { // the files workspace and the gate's run
		t.Fatalf("A's workspaces after the close: %d open, %d closed", open, closed)
	}
	if h, err := mustLeases(t, b).Holder(context.Background(), id); err != nil || h.ID != "" {
		t.Fatalf("the lease after the close: %+v, %v", h, err)
	}
	if n := countKind(turnLog(t, b, "alice", id), "takeover"); n != 0 {
		t.Fatalf("%d takeovers without a replica dying", n)
	}
}

// A stream forwarded through B does not depend on B's caller once A
// answers: B's side finishing the request body only after A's answer has
// begun (as on a loaded machine, where it once cut the stream) leaves the
// stream whole.
func TestReplicaForwardedStreamOutlivesItsBody(t *testing.T) {
	dsn := pgDSN(t)
	a, _ := newReplica(t, dsn, nil)
	b, _ := newReplica(t, dsn, a.tokens)
	id := a.open("alice")
	want(t, a.say("alice", id, "hello"), 200, "") // A holds it

	release := make(chan struct{})
	read := host.HoldForwardedBody(b.h, release)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	gateOnce := sync.OnceFunc(func() { close(a.gate.release) })
	defer gateOnce()

	req, _ := http.NewRequest("POST", b.url+"/v1/sessions/"+id+"/turns", strings.NewReader(`{"message":"call gate {}"}`))
	req.Header.Set("Authorization", "Bearer "+a.tokens["alice"])
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("stream through B: %d", res.StatusCode)
	}
	<-a.gate.entered // the turn runs on A, its stream open through B
	releaseOnce()
	<-read // B has read to the end of the body it sent
	gateOnce()
	evs := readSSE(t, res.Body)
	if len(evs) == 0 || evs[len(evs)-1].name != host.ResultEvent || !strings.Contains(string(evs[len(evs)-1].data), "released") {
		t.Fatalf("the stream through B: %+v", evs)
	}
}

func mustLeases(t *testing.T, f *fixture) *sqlstore.Leases {
	t.Helper()
	l, err := f.store.Leases(context.Background(), sqlstore.LeaseOptions{Replica: host.Replica{Address: "http://observer.test"}, TTL: testLease})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// streamTurn runs a turn as an event stream and returns its events; a
// stream that does not end cleanly fails the test.
func streamTurn(t *testing.T, f *fixture, who, id, msg string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest("POST", f.url+"/v1/sessions/"+id+"/turns", strings.NewReader(`{"message":"`+msg+`"}`))
	req.Header.Set("Authorization", "Bearer "+f.tokens[who])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, ct)
	}
	return readSSE(t, res.Body)
}

// A replica that stops renewing (it lost the store, or hung) and stops
// answering: requests elsewhere are told to retry until its lease lapses,
// then the replica they land on takes the conversation over from the
// store — the turn log says so, the model is told live state was lost,
// and nothing that ran before runs again. When the stale replica comes
// back it finds the lease gone and closes its copy.
func TestReplicaTakeover(t *testing.T) {
	dsn := pgDSN(t)
	a, al := newReplica(t, dsn, nil)
	b, _ := newReplica(t, dsn, a.tokens)

	id := a.open("alice")
	want(t, a.say("alice", id, `call files {"op":"write","name":"n.txt","text":"live state"}`), 200, "")
	al.cut.Store(true) // A's renewals fail from here on
	a.stop()           // and it answers nobody

	const ask = "what came before?"
	r := b.say("alice", id, ask)
	want(t, r, http.StatusServiceUnavailable, string(host.CodeReplicaUnavailable))
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q: want the seconds left on a %s lease", ra, testLease)
	}
	// Retry once the lease has lapsed (the store says when), within a
	// bound: B takes over.
	obs := mustLeases(t, b)
	deadline := time.Now().Add(10 * testLease)
	for r.status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		h, err := obs.Holder(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(h.Left) // zero once it has lapsed
		r = b.say("alice", id, ask)
	}
	want(t, r, 200, "")
	// The note came as a message of its own, just before the person's,
	// which reached the model as it was sent.
	out, _ := r.json(t)["output"].(string)
	if !strings.HasPrefix(out, "before: user: [agentry: this conversation was taken over") || !strings.Contains(out, "live") {
		t.Fatalf("the model was not told it lost live state: %q", out)
	}
	// Told once.
	if out := b.say("alice", id, "again").json(t)["output"]; out != "you said: again" {
		t.Fatalf("the turn after: %v", out)
	}
	if out := b.say("alice", id, ask).json(t)["output"]; out != "before: assistant: you said: again" {
		t.Fatalf("the second turn after: %v", out)
	}
	// The live state is gone; the transcript is not.
	if out := b.say("alice", id, `call files {"op":"read","name":"n.txt"}`).json(t)["output"]; out != "tool said: no such file" {
		t.Fatalf("B read A's live state: %v", out)
	}
	log := turnLog(t, b, "alice", id)
	if countKind(log, "takeover") != 1 || countKind(log, "message") != 5 {
		t.Fatalf("turn log: %+v", log)
	}
	for _, e := range log {
		if e["kind"] == "takeover" && (e["outcome"] != host.TurnTakenOver || !strings.Contains(e["error"].(string), "live state")) {
			t.Fatalf("the takeover entry: %+v", e)
		}
	}
	var msgs []any
	for _, m := range b.do("GET", "/v1/sessions/"+id+"/messages", "alice", nil).json(t)["messages"].([]any) {
		if m.(map[string]any)["role"] != "activity" {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) != 10 || msgs[2].(map[string]any)["content"] != ask {
		t.Fatalf("the transcript (the person's words, without the note): %+v", msgs)
	}

	// A comes back: its next renewal finds the lease gone, and it closes
	// the copy it held.
	closedBefore := len(a.rec.ofType(tool.TypeSessionClosed))
	al.cut.Store(false)
	a.rec.waitFor(t, tool.TypeSessionClosed, func(event.Event) bool { return true }, 10*testLease)
	if n := len(a.rec.ofType(tool.TypeSessionClosed)); n != closedBefore+1 {
		t.Fatalf("A closed %d sessions after losing the lease", n-closedBefore)
	}
	if open, _, _ := a.ws.stats(); open != 0 {
		t.Fatalf("A still holds %d workspaces", open)
	}
}

// A replica shutting down releases its leases once its sessions are
// closed: the next request elsewhere takes the conversation at once, with
// no takeover (nothing was lost that a restart would not lose).
func TestReplicaShutdownReleases(t *testing.T) {
	dsn := pgDSN(t)
	a, _ := newReplica(t, dsn, nil)
	b, _ := newReplica(t, dsn, a.tokens)
	id := a.open("alice")
	want(t, a.say("alice", id, "hello"), 200, "")
	a.shutdown()
	if h, err := mustLeases(t, b).Holder(context.Background(), id); err != nil || h.ID != "" {
		t.Fatalf("A's lease after its shutdown: %+v, %v", h, err)
	}
	if out := b.say("alice", id, "hello").json(t)["output"]; out != "you said: hello" {
		t.Fatalf("B after A's shutdown: %v", out)
	}
	if n := countKind(turnLog(t, b, "alice", id), "takeover"); n != 0 {
		t.Fatalf("%d takeovers after a clean shutdown", n)
	}
}

// A tenant's admin closing a conversation through a replica that does not
// hold it reaches the holder, which closes its live session and frees the
// lease, as the owner's own close would.
func TestReplicaAdminCloseReachesTheHolder(t *testing.T) {
	dsn := pgDSN(t)
	a, _ := newReplica(t, dsn, nil)
	b, _ := newReplica(t, dsn, a.tokens)

	id := a.open("bob")
	want(t, a.say("bob", id, `call files {"op":"write","name":"n.txt","text":"x"}`), 200, "")
	want(t, b.do("GET", "/v1/tenants/acme/sessions/"+id, "root", nil), 200, "")
	want(t, b.do("DELETE", "/v1/tenants/acme/sessions/"+id, "root", nil), http.StatusNoContent, "")
	if open, _, closed := a.ws.stats(); open != 0 || closed != 1 {
		t.Fatalf("A's workspaces after the admin's close: %d open, %d closed", open, closed)
	}
	if _, opened, _ := b.ws.stats(); opened != 0 {
		t.Fatalf("B opened %d workspaces", opened)
	}
	if h, err := mustLeases(t, b).Holder(context.Background(), id); err != nil || h.ID != "" {
		t.Fatalf("the lease after the close: %+v, %v", h, err)
	}
	if st := a.do("GET", "/v1/sessions/"+id, "bob", nil).json(t)["state"]; st != "closed" {
		t.Fatalf("bob's conversation: %v", st)
	}
}
