package audit_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/event/ndjson"
)

// FuzzAudit feeds arbitrary files to the auditor, the summarizer and the
// formatter: nothing panics, the counts agree, and no output line can
// carry a control character to the terminal.
func FuzzAudit(f *testing.F) {
	f.Add([]byte(`{"type":"agentry.tools.session_started","payload":{"tool":"t","scope":"run","keyHash":"k"},"meta":{"runId":"r","seq":1,"time":"2026-01-01T00:00:00Z"}}
{"type":"agentry.agent.turn_end","payload":{"outcome":"answer"},"meta":{"runId":"r","seq":2,"time":"2026-01-01T00:00:01Z"}}
`))
	f.Add([]byte(`{"type":"agentry.tools.session_close_failed","payload":{"tool":"\u001b[2J","scope":"run","reason":"run-end","error":"x\ny"},"meta":{"seq":1,"time":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"type":"agentry.tools.session_reused","payload":{"keyHash":""},"meta":{"runId":"","seq":0,"time":"0001-01-01T00:00:00Z"}}` + "\n\x00\n"))
	f.Add([]byte(`{"type":"agentry.llm.end","payload":{"durationMs":-1e300,"inputTokens":-5}}` + "\n" + `{"type":"agentry.tool.end","payload":{"tool":"a","durationMs":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, s := audit.NewAuditor(), audit.NewSummarizer()
		var lines []string
		_, err := ndjson.Scan(bytes.NewReader(data), func(e event.Event) {
			a.Add(e)
			s.Add(e)
			lines = append(lines, audit.Format(e, false), audit.Format(e, true))
		})
		if err != nil {
			t.Fatal(err)
		}
		r := a.Report()
		opened, reused := 0, 0
		for _, ts := range r.Tools {
			opened += ts.Opened
			reused += ts.Reused
		}
		if len(r.Open) > opened+reused {
			t.Fatalf("%d open of %d opened and %d reused", len(r.Open), opened, reused)
		}
		sum := s.Summary()
		total := 0
		for _, tc := range sum.ByType {
			total += tc.Count
		}
		if total != sum.Events || sum.Events != r.Events {
			t.Fatalf("counts disagree: %d by type, %d summarised, %d audited", total, sum.Events, r.Events)
		}
		for _, l := range lines {
			for _, c := range strings.ReplaceAll(l, "\x1b[", "") { // our own colour codes
				if c < ' ' || c == 0x7f {
					t.Fatalf("a control character reaches the terminal: %q", l)
				}
			}
		}
	})
}
