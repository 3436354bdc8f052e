package local_test

// Benchmarks for the figures docs/code.md quotes. The machine is shared,
// so each figure that is a comparison is measured interleaved, in the
// same benchmark, and reported as a ratio or a difference:
//
//	go test -run '^$' -bench . -benchtime 3s ./code/local/

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

const benchCode = "total = sum(range(100))"

func benchSession(b *testing.B, r code.Runner, lang string) code.Session {
	b.Helper()
	s, err := r.Start(context.Background(), code.StartRequest{Key: "bench", Language: lang})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

func timeExec(b *testing.B, s code.Session, src string) time.Duration {
	t0 := time.Now()
	res, err := s.Execute(context.Background(), code.ExecRequest{Code: src})
	d := time.Since(t0)
	if err != nil || !res.OK {
		b.Fatalf("%v %+v", err, res)
	}
	return d
}

// BenchmarkReuse: a warm execute on a persistent interpreter against a
// cold process per call, same code, measured in alternating blocks (4 cold,
// then 200 warm) so that both see the same machine. reuse-x is the ratio
// of their means; first-warm-µs is the mean of the first warm execute
// after each cold block, when the interpreter's caches have gone cold —
// closer to what an execute costs after a model's think time.
func BenchmarkReuse(b *testing.B) {
	for _, jail := range []bool{false, true} {
		name := "plain"
		opt := options(b)
		if jail {
			name = "jailed"
			opt = jailed(b, opt)
		}
		b.Run(name, func(b *testing.B) {
			cold := benchSession(b, local.New(opt), "python")
			warm := benchSession(b, local.NewInterpreter(opt), "python")
			timeExec(b, cold, benchCode)
			timeExec(b, warm, benchCode)
			var tc, tw, tf time.Duration
			var nc, nw, nf int
			for b.Loop() {
				for range 4 {
					tc += timeExec(b, cold, benchCode)
					nc++
				}
				for i := range 200 {
					d := timeExec(b, warm, benchCode)
					if i == 0 {
						tf += d
						nf++
						continue
					}
					tw += d
					nw++
				}
			}
			mc, mw, mf := tc/time.Duration(nc), tw/time.Duration(nw), tf/time.Duration(nf)
			b.ReportMetric(float64(mc.Microseconds())/1000, "cold-ms")
			b.ReportMetric(float64(mw.Nanoseconds())/1000, "warm-µs")
			b.ReportMetric(float64(mf.Nanoseconds())/1000, "first-warm-µs")
			b.ReportMetric(float64(mc)/float64(mw), "reuse-x")
		})
	}
}

// BenchmarkJailStartup: what the jail adds to starting code, measured
// interleaved against the same start unjailed: a process per call (sh
// and python) and a persistent interpreter's Start.
func BenchmarkJailStartup(b *testing.B) {
	plainOpt := options(b)
	jailOpt := jailed(b, options(b))
	for _, lang := range []string{"sh", "python"} {
		b.Run("process-"+lang, func(b *testing.B) {
			src := map[string]string{"sh": ":", "python": "pass"}[lang]
			plain := benchSession(b, local.New(plainOpt), lang)
			jail := benchSession(b, local.New(jailOpt), lang)
			timeExec(b, plain, src)
			timeExec(b, jail, src)
			var tp, tj time.Duration
			n := 0
			for b.Loop() {
				tp += timeExec(b, plain, src)
				tj += timeExec(b, jail, src)
				n++
			}
			report(b, tp, tj, n)
		})
	}
	b.Run("interpreter-start", func(b *testing.B) {
		plain, jail := local.NewInterpreter(plainOpt), local.NewInterpreter(jailOpt)
		timeStart := func(r code.Runner) time.Duration {
			t0 := time.Now()
			s, err := r.Start(context.Background(), code.StartRequest{Key: "bench"})
			d := time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			s.Stop(context.Background())
			return d
		}
		timeStart(jail) // the first jailed start probes bwrap once
		var tp, tj time.Duration
		n := 0
		for b.Loop() {
			tp += timeStart(plain)
			tj += timeStart(jail)
			n++
		}
		report(b, tp, tj, n)
	})
}

func report(b *testing.B, plain, jail time.Duration, n int) {
	mp, mj := plain/time.Duration(n), jail/time.Duration(n)
	b.ReportMetric(float64(mp.Microseconds())/1000, "plain-ms")
	b.ReportMetric(float64(mj.Microseconds())/1000, "jailed-ms")
	b.ReportMetric(float64((mj-mp).Microseconds())/1000, "extra-ms")
}

// BenchmarkSessionMemory: the memory one live interpreter session holds,
// as RSS and as PSS (shared pages split between the sessions sharing
// them), summed over the session's processes (bwrap's too when jailed).
func BenchmarkSessionMemory(b *testing.B) {
	for _, jail := range []bool{false, true} {
		name := "plain"
		opt := options(b)
		if jail {
			name = "jailed"
			opt = jailed(b, opt)
		}
		b.Run(name, func(b *testing.B) {
			const n = 8
			r := local.NewInterpreter(opt)
			var pids []int
			for range n {
				s := benchSession(b, r, "python")
				timeExec(b, s, benchCode)
				pids = append(pids, s.(interface{ Pid() int }).Pid())
			}
			var rss, pss int
			for b.Loop() {
				rss, pss = 0, 0
				for _, pid := range pids {
					for _, p := range tree(pid) {
						rss += statusKB(p, "VmRSS:")
						pss += rollupKB(p, "Pss:")
					}
				}
			}
			b.ReportMetric(float64(rss)/n/1024, "RSS-MiB/session")
			b.ReportMetric(float64(pss)/n/1024, "PSS-MiB/session")
		})
	}
}

// tree is pid and its descendants.
func tree(pid int) []int {
	out := []int{pid}
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(kids)) {
		k, _ := strconv.Atoi(f)
		out = append(out, tree(k)...)
	}
	return out
}

func statusKB(pid int, field string) int {
	return fieldKB(fmt.Sprintf("/proc/%d/status", pid), field)
}

func rollupKB(pid int, field string) int {
	return fieldKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), field)
}

func fieldKB(path, field string) int {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.Atoi(f[1])
				return n
			}
		}
	}
	return 0
}

// BenchmarkSessionStart: what a session's first answer costs — open a
// session and run print(1) — on a jailed interpreter started cold, and on
// one taken from a warm pool (refilled between samples, as a pool is at a
// steady load below its refill rate). first-exec-ms is the mean.
//
//	go test -run '^$' -bench SessionStart -benchtime 20x ./code/local/
func BenchmarkSessionStart(b *testing.B) {
	opt := jailed(b, options(b))
	first := func(b *testing.B, r *local.Interpreter, warm bool) {
		ctx := context.Background()
		var total time.Duration
		n := 0
		for b.Loop() {
			if warm {
				b.StopTimer()
				if err := r.Warm(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			t0 := time.Now()
			s, err := r.Start(ctx, code.StartRequest{Key: "bench-" + strconv.Itoa(n)})
			if err != nil {
				b.Fatal(err)
			}
			res, err := s.Execute(ctx, code.ExecRequest{Code: "print(1)"})
			d := time.Since(t0)
			if err != nil || res.Stdout != "1\n" {
				b.Fatalf("%v %+v", err, res)
			}
			b.StopTimer()
			s.Stop(ctx)
			b.StartTimer()
			total += d
			n++
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(n), "first-exec-ms")
	}
	b.Run("cold", func(b *testing.B) {
		r := local.NewInterpreter(opt)
		if err := r.Warm(context.Background()); err != nil { // the jail's one-time probe
			b.Fatal(err)
		}
		first(b, r, false)
	})
	b.Run("pooled", func(b *testing.B) {
		o := opt
		o.Pool = local.Pool{Size: 2}
		r := local.NewInterpreter(o)
		b.Cleanup(func() { r.Close(context.Background()) })
		first(b, r, true)
	})
}
