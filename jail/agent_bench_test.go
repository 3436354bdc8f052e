//go:build linux

package jail_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/jail"
)

// BenchmarkLaunch measures launch → first byte on stdout of a trivial
// agent (/bin/echo), jailed and bare (os/exec, same command), and reports
// first-byte-ms. The difference is the jail's share of an agent's start.
//
//	go test -run '^$' -bench BenchmarkLaunch -benchtime 50x ./jail/
func BenchmarkLaunch(b *testing.B) {
	needJail(b)
	ws := reachableDir(b)
	b.Run("jail", func(b *testing.B) {
		j := newAgent(b, jail.AgentOptions{})
		if err := j.Check(context.Background()); err != nil {
			b.Fatal(err)
		}
		var total time.Duration
		for b.Loop() {
			start := time.Now()
			p, err := j.Launch(context.Background(), jail.Spec{Argv: []string{"/bin/echo", "x"}, Workspace: ws, AllowHosts: []string{"127.0.0.1:9"}})
			if err != nil {
				b.Fatal(err)
			}
			firstByte(b, p.Stdout().Read)
			total += time.Since(start)
			b.StopTimer()
			<-p.Done()
			p.Stdout().Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "first-byte-ms")
	})
	b.Run("bare", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			start := time.Now()
			cmd := exec.Command("/bin/echo", "x")
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			firstByte(b, out.Read)
			total += time.Since(start)
			b.StopTimer()
			cmd.Wait()
			b.StartTimer()
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "first-byte-ms")
	})
}

func firstByte(b *testing.B, read func([]byte) (int, error)) {
	buf := make([]byte, 1)
	if n, err := read(buf); n != 1 {
		b.Fatalf("no first byte: %v", err)
	}
}
