package acp_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider"
)

// BenchmarkStartCost measures what one session costs to start, from
// Create to the agent's first answer, against a baseline: starting the
// same agent executable and letting it exit (the process alone). With the
// unjailed launcher the difference is the ACP handshake (initialize,
// session/new) and the first prompt; a jailed launcher adds its share.
//
//	go test -run XXX -bench StartCost -benchtime 20x ./provider/acp/
func BenchmarkStartCost(b *testing.B) {
	r := newRig(b, nil)
	argv := scriptedCommand(b)
	b.Run("process", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(argv[0])
			cmd.Env = []string{"ACP_SCRIPTED_AGENT=1"}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	inst := r.instance(r.config(nil, nil))
	b.Run("create_first_answer", func(b *testing.B) {
		benchFirstAnswer(b, r, inst)
	})
}

// benchFirstAnswer times, per session, Create to the first text of its
// first turn, and reports the mean as first-answer-ms. Closing is not
// timed.
func benchFirstAnswer(b *testing.B, r *rig, inst *provider.Instance) {
	var total time.Duration
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		s, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: fmt.Sprintf("b%d", n), WorkingDirectory: r.ws})
		if err != nil {
			b.Fatal(err)
		}
		for o, err := range s.RunTurn(context.Background(), provider.TurnRequest{TurnID: "t1", Input: "hello"}) {
			if err != nil {
				b.Fatal(err)
			}
			if o.Kind == provider.OutputText {
				total += time.Since(start)
				break
			}
		}
		b.StopTimer()
		_ = s.Close(context.Background(), provider.CloseRequested)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(n), "first-answer-ms")
}
