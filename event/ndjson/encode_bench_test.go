package ndjson

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
)

func BenchmarkEncode(b *testing.B) {
	exit := 0
	e := event.Event{Type: code.TypeRun,
		Payload: &code.RunReport{Tool: "run_code", RunnerID: "local-python", Language: "python", OK: true, ExitCode: &exit, OutputChars: 918, StagedInputs: 1, ShapeHash: "9c1d7e20ab44", DurationMs: 412.5},
		Meta: event.Meta{RunID: "run-5f0c2a7e-9b1d-4c3e-8f6a-2d7b9e1c4a55", SessionID: "conv-8d2e4f6a-1b3c-4d5e-9f7a-0b1c2d3e4f5a",
			Tenant: "acme", Principal: "alice", Seq: 1234, Time: time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.UTC)}}
	b.Run("ours", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = appendEvent(buf[:0], e)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(e)
		}
	})
	b.Run("string", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = appendString(buf[:0], "run-5f0c2a7e-9b1d-4c3e-8f6a-2d7b9e1c4a55")
		}
	})
	b.Run("time", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf, _ = appendTime(buf[:0], e.Meta.Time)
		}
	})
}
