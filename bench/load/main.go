// Command load drives concurrent sessions against an agentry host over
// HTTP, through the client generated from the API's OpenAPI document
// (package client), and reports turns per second and latency percentiles.
//
// By default it starts a host in this process on a real loopback listener
// (SQLite store in a temporary directory, the scripted model, no tools) and
// drives it. With -url it drives a running `agentry serve` instead, with
// the bearer tokens in -tokens (one raw token a line).
//
//	go run ./bench/load -sessions 100 -turns 50
//	go run ./bench/load -url http://127.0.0.1:8080 -tokens raw-tokens.txt -message 'print(1)'
//
// Several -url, comma-separated, are replicas of one host on one
// PostgreSQL: session i is opened (and warmed up) on replica i mod N,
// which then holds it, and its turns go round the replicas, so (N-1)/N
// of them are forwarded to the holder. The report gives direct and
// forwarded turns apart, with their ratio from the same run.
//
//	go run ./bench/load -url http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083 -tokens raw-tokens.txt -pid 0
//
// Every run is bounded: -turns per session and -max-duration in all.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/client"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

type config struct {
	url, tokensFile, message, store string
	sessions, turns, principals     int
	replicas                        int
	maxDuration                     time.Duration
	keepOpen, baseline, jail        bool
	mode, expect                    string
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "", "drive this host (default: start one in this process); several, comma-separated, are replicas sharing one store: turns go round them")
	flag.StringVar(&c.tokensFile, "tokens", "", "with -url: a file of raw bearer tokens, one a line; sessions are spread over them")
	flag.StringVar(&c.message, "message", "", "what every turn says (default: hello; with -mode interpreter, print(sum(range(1000))))")
	flag.StringVar(&c.mode, "mode", "answer", "in-process: answer (the scripted model answers, no tools) or interpreter (the scripted calculator runs each message in a persistent interpreter per session)")
	flag.StringVar(&c.expect, "expect", "", "count a 200 whose output lacks this as a failure (default: ok; with -mode interpreter, 499500)")
	flag.BoolVar(&c.jail, "jail", false, "with -mode interpreter: run the interpreters inside bubblewrap")
	flag.IntVar(&c.sessions, "sessions", 100, "concurrent sessions")
	flag.IntVar(&c.turns, "turns", 50, "turns per session (after one warm-up turn)")
	flag.IntVar(&c.replicas, "replicas", 1, "in-process: this many hosts on the one -store (a postgres:// URL for more than one), with ownership leases; turns go round them")
	flag.IntVar(&c.principals, "principals", 10, "in-process: principals the sessions are spread over")
	flag.StringVar(&c.store, "store", "", "in-process: the store DSN (default: SQLite in a temporary directory; a postgres:// URL works)")
	flag.DurationVar(&c.maxDuration, "max-duration", 2*time.Minute, "stop after this long whatever is left")
	flag.BoolVar(&c.keepOpen, "keep-open", false, "leave the sessions open at the end (default: close them)")
	flag.BoolVar(&c.baseline, "baseline", true, "first drive a bare net/http JSON handler the same way, and report the host against it")
	flag.IntVar(&memRoot, "pid", os.Getpid(), "measure the memory of this process and its children (with -url: the agentry serve's pid; 0: none)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	if c.sessions < 1 || c.turns < 1 {
		return errors.New("-sessions and -turns must be at least 1")
	}
	switch c.mode {
	case "", "answer":
		c.mode = "answer"
		if c.message == "" {
			c.message, c.expect = "hello", cmp.Or(c.expect, `"ok"`)
		}
	case "interpreter":
		if c.message == "" {
			c.message, c.expect = "print(sum(range(1000)))", cmp.Or(c.expect, "499500")
		}
	default:
		return fmt.Errorf("-mode %q: use answer or interpreter", c.mode)
	}
	var base *result
	if c.baseline {
		b, err := runBaseline(ctx, c)
		if err != nil {
			return err
		}
		base = b
	}
	var tokens []string
	var targets []string
	for _, u := range strings.Split(c.url, ",") {
		if u = strings.TrimSpace(u); u != "" {
			targets = append(targets, strings.TrimSuffix(u, "/"))
		}
	}
	if len(targets) == 0 {
		srv, toks, err := startInProcess(ctx, c)
		if err != nil {
			return err
		}
		defer srv.stop()
		targets, tokens = srv.urls, toks
		storeName := "SQLite"
		if strings.HasPrefix(c.store, "postgres") {
			storeName = "PostgreSQL"
		}
		what := "scripted model, no tools"
		if c.mode == "interpreter" {
			what = "scripted calculator, run_code on a persistent interpreter per session"
			if c.jail {
				what += " in bubblewrap"
			}
		}
		fmt.Fprintf(out, "host: in process on %s (%s, %s), GOMAXPROCS=%d\n", strings.Join(targets, ", "), storeName, what, runtime.GOMAXPROCS(0))
		if len(targets) > 1 {
			fmt.Fprintf(out, "replicas: %d in this process; each session is held by the replica it was opened on, and its turns go round all of them\n", len(targets))
		}
	} else {
		if memRoot == os.Getpid() {
			memRoot = 0 // the host is elsewhere; -pid names it
		}
		b, err := os.ReadFile(c.tokensFile)
		if err != nil {
			return fmt.Errorf("-url needs -tokens, a file of raw bearer tokens: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				tokens = append(tokens, l)
			}
		}
		if len(tokens) == 0 {
			return fmt.Errorf("%s holds no token", c.tokensFile)
		}
		fmt.Fprintf(out, "host: %s\n", strings.Join(targets, ", "))
		if len(targets) > 1 {
			fmt.Fprintf(out, "replicas: %d; each session is held by the replica it was opened on, and its turns go round all of them\n", len(targets))
		}
	}
	res, err := drive(ctx, c, targets, tokens)
	if err != nil {
		return err
	}
	res.print(out, c)
	if base != nil {
		bl := float64(len(base.latencies)) / base.elapsed.Seconds()
		fmt.Fprintf(out, "baseline (a bare net/http JSON handler, same client and concurrency, same run): %.0f requests/s, p50 %s, p99 %s\n",
			bl, base.pct(.50).Round(10*time.Microsecond), base.pct(.99).Round(10*time.Microsecond))
		fmt.Fprintf(out, "host / baseline: %.2f× the throughput\n", float64(len(res.latencies))/res.elapsed.Seconds()/bl)
	}
	return nil
}

// runBaseline drives a handler that only decodes the turn's JSON and
// answers, on its own loopback listener: what HTTP and the client cost on
// this machine right now.
func runBaseline(ctx context.Context, c config) (*result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sessionId":"ses_00000000000000000000000000000000","state":"open","turns":0,"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}`))
	})
	mux.HandleFunc("POST /v1/sessions/{id}/turns", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Message string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"output":"ok","runId":"run-baseline"}`))
	})
	mux.HandleFunc("DELETE /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()); <-done }()
	saved := memRoot
	memRoot = 0
	defer func() { memRoot = saved }()
	return drive(ctx, c, []string{"http://" + ln.Addr().String()}, []string{"baseline"})
}

// ---- the in-process host ----

type inProcess struct {
	urls []string
	stop func()
}

func startInProcess(ctx context.Context, c config) (*inProcess, []string, error) {
	dir, err := os.MkdirTemp("", "agentry-load-")
	if err != nil {
		return nil, nil, err
	}
	steps := make([]scripted.Step, c.turns+2)
	for i := range steps {
		steps[i] = scripted.Step{Text: "ok"}
	}
	opt := agent.Options{ID: "load", Model: scripted.New(steps...), MaxLiveSessions: 4 * c.sessions}
	if c.mode == "interpreter" {
		lo := local.Options{} // session directories under os.TempDir(), which a jail's user can reach
		if c.jail {
			lo.Jail = &local.Jail{}
		}
		opt.Model = scripted.Calculator()
		opt.Tools = []tool.Tool{code.NewTool(local.NewInterpreter(lo), code.ToolOptions{Scope: toolsession.ScopeSession})}
	}
	dsn := c.store
	if dsn == "" {
		dsn = filepath.Join(dir, "agentry.db")
	}
	var lines, toks []string
	for i := range max(c.principals, 1) {
		tok, line, err := host.GenerateToken(tool.Identity{Tenant: "load", Principal: fmt.Sprintf("p%03d", i)})
		if err != nil {
			return nil, nil, err
		}
		toks, lines = append(toks, tok), append(lines, line)
	}
	auth, err := host.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		return nil, nil, err
	}
	pg := strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
	n := max(c.replicas, 1)
	if n > 1 && !pg {
		return nil, nil, errors.New("-replicas above 1 share one store: pass -store postgres://…")
	}
	ip := &inProcess{}
	var stops []func(context.Context)
	ip.stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range stops {
			s(sctx)
		}
		_ = os.RemoveAll(dir)
	}
	for range n {
		var st *sqlstore.Store
		if pg {
			st, err = postgres.Open(ctx, dsn)
		} else {
			st, err = sqlite.Open(ctx, dsn)
		}
		if err != nil {
			ip.stop()
			return nil, nil, err
		}
		router := host.NewEventSink()
		o := opt
		o.Routes = []agent.Route{{Sink: router, Filter: router.Filter()}}
		reg, inst, err := native.Open(ctx, native.Config{Store: native.HostStore(st), TurnRunIDs: true, Agent: native.Fixed(o)})
		if err != nil {
			_ = st.Close()
			ip.stop()
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = reg.Dispose(ctx)
			_ = st.Close()
			ip.stop()
			return nil, nil, err
		}
		url := "http://" + ln.Addr().String()
		var leases host.Leases
		if n > 1 {
			if leases, err = st.Leases(ctx, sqlstore.LeaseOptions{Replica: host.Replica{Address: url}}); err != nil {
				_ = ln.Close()
				_ = reg.Dispose(ctx)
				_ = st.Close()
				ip.stop()
				return nil, nil, err
			}
		}
		h, err := host.New(host.Options{Provider: inst, Store: st, Auth: auth, EventSink: router, Leases: leases,
			MaxTurns: 4 * c.sessions, MaxTurnsPerPrincipal: c.sessions, MaxConversationsPerPrincipal: c.sessions + 1})
		if err != nil {
			_ = ln.Close()
			_ = reg.Dispose(ctx)
			_ = st.Close()
			ip.stop()
			return nil, nil, err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		ip.urls = append(ip.urls, url)
		stops = append(stops, func(sctx context.Context) {
			_ = h.Shutdown(sctx)
			_ = srv.Shutdown(sctx)
			<-done
			_ = reg.Dispose(sctx)
		})
	}
	return ip, toks, nil
}

// ---- the driver ----

type result struct {
	latencies []time.Duration
	elapsed   time.Duration
	failures  map[string]int
	opened    int
	mem       memReport
	sorted    bool
	live      int // live tool sessions while the sessions were held; -1 unknown
	// direct and forwarded split latencies by whether the turn landed on
	// the replica holding its session (with several replicas only).
	direct, forwarded []time.Duration
	// unexpected is one answer that lacked -expect.
	unexpected string
}

// liveToolSessions reads agentry_tool_sessions_live from /metrics, or -1.
func liveToolSessions(ctx context.Context, api *client.ClientWithResponses) int {
	res, err := api.MetricsWithResponse(ctx)
	if err != nil || res.StatusCode() != http.StatusOK {
		return -1
	}
	for _, l := range strings.Split(string(res.Body), "\n") {
		if v, ok := strings.CutPrefix(l, "agentry_tool_sessions_live "); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// loadSession is one session the load drives, through the client
// generated from docs/openapi.yaml.
type loadSession struct {
	apis map[string]*client.ClientWithResponses // by host address
	base string                                 // where the session was opened (the replica holding it)
	auth client.RequestEditorFn
	id   string
}

// newAPIs makes a client for each host address, all on one HTTP client.
func newAPIs(hc *http.Client, bases []string) (map[string]*client.ClientWithResponses, error) {
	apis := make(map[string]*client.ClientWithResponses, len(bases))
	for _, b := range bases {
		api, err := client.NewClientWithResponses(b, client.WithHTTPClient(hc))
		if err != nil {
			return nil, err
		}
		apis[b] = api
	}
	return apis, nil
}

// open opens the session where it is held.
func (s *loadSession) open(ctx context.Context) error {
	res, err := s.apis[s.base].CreateSessionWithResponse(ctx, client.CreateSessionRequest{}, s.auth)
	switch {
	case err != nil:
		return err
	case res.JSON201 == nil:
		return fmt.Errorf("opening a session: %d %s", res.StatusCode(), res.Body)
	}
	s.id = res.JSON201.SessionId
	return nil
}

// turn sends one message through the host at base, and returns the
// answer's status and body.
func (s *loadSession) turn(ctx context.Context, base string, msg client.TurnRequest) (int, []byte, error) {
	res, err := s.apis[base].SendMessageWithResponse(ctx, s.id, msg, s.auth)
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode(), res.Body, nil
}

func (s *loadSession) close(ctx context.Context) {
	_, _ = s.apis[s.base].CloseSessionWithResponse(ctx, s.id, s.auth)
}

// openAll opens n sessions, spread over the hosts and the tokens, each
// with a warm-up turn (which also starts any live tool session the turn
// uses).
func openAll(ctx context.Context, n int, apis map[string]*client.ClientWithResponses, bases, tokens []string, turn client.TurnRequest) ([]*loadSession, error) {
	sessions := make([]*loadSession, n)
	var openErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		s := &loadSession{apis: apis, base: bases[i%len(bases)], auth: client.BearerToken(tokens[i%len(tokens)])}
		sessions[i] = s
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			err := s.open(ctx)
			if err == nil {
				code, b, terr := s.turn(ctx, s.base, turn)
				if err = terr; err == nil && code != http.StatusOK {
					err = fmt.Errorf("warm-up turn: %d %s", code, b)
				}
			}
			if err != nil {
				mu.Lock()
				openErr = errors.Join(openErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sessions, openErr
}

func drive(ctx context.Context, c config, bases []string, tokens []string) (*result, error) {
	tr := &http.Transport{MaxIdleConns: 2 * c.sessions, MaxIdleConnsPerHost: 2 * c.sessions, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	apis, err := newAPIs(hc, bases)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.maxDuration)
	defer cancel()

	memBefore := sample()
	turn := client.TurnRequest{Message: c.message}
	sessions, err := openAll(ctx, c.sessions, apis, bases, tokens, turn)
	if err != nil {
		return nil, err
	}
	memHeld := sample()
	liveHeld := 0
	for _, b := range bases {
		n := liveToolSessions(ctx, apis[b])
		if n < 0 {
			liveHeld = -1
			break
		}
		liveHeld += n
	}

	res := &result{failures: map[string]int{}, opened: c.sessions}
	lat := make([][]time.Duration, c.sessions)
	fwd := make([][]time.Duration, c.sessions)
	dir := make([][]time.Duration, c.sessions)
	var failures sync.Map
	var failed atomic.Int64
	var odd atomic.Pointer[[]byte]
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range sessions {
		wg.Go(func() {
			mine := make([]time.Duration, 0, c.turns)
			var forwarded, direct []time.Duration
			for k := range c.turns {
				if ctx.Err() != nil {
					break
				}
				// Round the replicas, starting from the next one after
				// the holder's.
				at := bases[(i+k+1)%len(bases)]
				t0 := time.Now()
				code, b, err := s.turn(ctx, at, turn)
				d := time.Since(t0)
				if err == nil && code == http.StatusOK && c.expect != "" && !bytes.Contains(b, []byte(c.expect)) {
					err = errors.New("unexpected answer")
					if len(b) > 0 {
						odd.CompareAndSwap(nil, &b)
					}
				}
				if err != nil || code != http.StatusOK {
					key := fmt.Sprint(code)
					if err != nil {
						key = err.Error()
					} else {
						var e client.Error
						_ = json.Unmarshal(b, &e)
						key += " " + string(e.Error.Code)
					}
					n, _ := failures.LoadOrStore(key, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
					failed.Add(1)
					continue
				}
				if at != s.base {
					forwarded = append(forwarded, d)
				} else {
					direct = append(direct, d)
				}
				mine = append(mine, d)
			}
			lat[i], fwd[i], dir[i] = mine, forwarded, direct
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	for i, l := range lat {
		res.latencies = append(res.latencies, l...)
		if len(bases) > 1 {
			res.forwarded = append(res.forwarded, fwd[i]...)
			res.direct = append(res.direct, dir[i]...)
		}
	}
	failures.Range(func(k, v any) bool { res.failures[k.(string)] = int(v.(*atomic.Int64).Load()); return true })
	if b := odd.Load(); b != nil {
		res.unexpected = string(*b)
	}
	res.mem = memReport{before: memBefore, held: memHeld}
	res.live = liveHeld

	if !c.keepOpen {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		sem := make(chan struct{}, 32)
		for _, s := range sessions {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				s.close(cctx)
			})
		}
		wg.Wait()
		res.mem.closed = sample()
	}
	return res, nil
}

func (r *result) pct(p float64) time.Duration {
	if !r.sorted {
		slices.Sort(r.latencies)
		r.sorted = true
	}
	l := r.latencies
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(p*float64(len(l))))]
}

func (r *result) print(out io.Writer, c config) {
	l := r.latencies
	pct := r.pct
	fmt.Fprintf(out, "sessions: %d concurrent, %d turns each (+1 warm-up), message %q\n", c.sessions, c.turns, c.message)
	fmt.Fprintf(out, "turns: %d answered in %s: %.0f turns/s\n", len(l), r.elapsed.Round(time.Millisecond), float64(len(l))/r.elapsed.Seconds())
	fmt.Fprintf(out, "latency: p50 %s  p90 %s  p99 %s  max %s\n", pct(.50).Round(10*time.Microsecond), pct(.90).Round(10*time.Microsecond),
		pct(.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
	if len(r.failures) > 0 {
		fmt.Fprintf(out, "failures: %v\n", r.failures)
		if r.unexpected != "" {
			fmt.Fprintf(out, "an unexpected answer: %.300s\n", r.unexpected)
		}
	}
	if len(r.forwarded) > 0 && len(r.direct) > 0 {
		d, f := percentiles(r.direct), percentiles(r.forwarded)
		fmt.Fprintf(out, "direct turns (on the holder): %d, p50 %s p99 %s; forwarded turns: %d, p50 %s p99 %s\n",
			len(r.direct), d(.50).Round(10*time.Microsecond), d(.99).Round(10*time.Microsecond),
			len(r.forwarded), f(.50).Round(10*time.Microsecond), f(.99).Round(10*time.Microsecond))
		fmt.Fprintf(out, "forwarded / direct: %.2f× the p50 latency, %.2f× the p99 (same run)\n",
			f(.50).Seconds()/d(.50).Seconds(), f(.99).Seconds()/d(.99).Seconds())
	}
	if r.live >= 0 {
		fmt.Fprintf(out, "live tool sessions while held: %d\n", r.live)
	}
	r.mem.print(out, c.sessions)
}

// percentiles sorts l and returns its percentile function.
func percentiles(l []time.Duration) func(float64) time.Duration {
	slices.Sort(l)
	return func(p float64) time.Duration { return l[min(len(l)-1, int(p*float64(len(l))))] }
}
