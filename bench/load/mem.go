package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// memSample is the resident memory of a process and its descendants (a
// host and the interpreters it started).
type memSample struct {
	rssBytes int64
	procs    int
	ok       bool
}

// memRoot is the process whose tree is measured; 0 measures nothing.
var memRoot = os.Getpid()

func sample() memSample {
	if memRoot == 0 || runtime.GOOS != "linux" {
		return memSample{}
	}
	runtime.GC()
	parent := map[int]int{}
	rss := map[int]int64{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return memSample{}
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[pid] = pp
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "statm")); err == nil {
			g := strings.Fields(string(st))
			if len(g) > 1 {
				pages, _ := strconv.ParseInt(g[1], 10, 64)
				rss[pid] = pages * int64(os.Getpagesize())
			}
		}
	}
	var out memSample
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if p == memRoot {
				out.rssBytes += rss[pid]
				out.procs++
				break
			}
		}
	}
	out.ok = out.procs > 0
	return out
}

type memReport struct{ before, held, closed memSample }

func (m memReport) print(out io.Writer, sessions int) {
	if !m.before.ok || !m.held.ok {
		return
	}
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Fprintf(out, "memory (RSS of the host's process tree): %.1f MB before, %.1f MB holding %d sessions (%d processes): %.2f MB per session\n",
		mb(m.before.rssBytes), mb(m.held.rssBytes), sessions, m.held.procs, mb(m.held.rssBytes-m.before.rssBytes)/float64(sessions))
	if m.closed.ok {
		fmt.Fprintf(out, "after closing them: %.1f MB (%d processes)\n", mb(m.closed.rssBytes), m.closed.procs)
	}
}
