package native

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// The memory store's encoding names every field of the types it covers;
// a new field must be added to it (and here) or it would be lost.
func TestRecordCodecKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		v      any
		fields []string
	}{
		{Record{}, []string{"Conversation", "Turns", "Pending"}},
		{agent.Conversation{}, []string{"Version", "Identity", "Messages"}},
		{tool.Identity{}, []string{"Tenant", "Principal", "ConversationID"}},
		{llm.Message{}, []string{"Role", "Content", "ToolCalls", "ToolCallID", "ToolName", "IsError"}},
		{llm.ToolCall{}, []string{"ID", "Name", "Args"}},
		{TurnMark{}, []string{"ID", "Messages"}},
	} {
		typ := reflect.TypeOf(tc.v)
		var got []string
		for i := range typ.NumField() {
			got = append(got, typ.Field(i).Name)
		}
		if !slices.Equal(got, tc.fields) {
			t.Errorf("%s has fields %v; the memory store's encoding knows %v: update record.go", typ, got, tc.fields)
		}
	}
}

func sampleRecord() Record {
	return Record{
		Conversation: agent.Conversation{Version: 1, Identity: &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "c"},
			Messages: []llm.Message{
				{Role: llm.RoleUser, Content: "go"},
				{Role: llm.RoleAssistant, Content: "calling", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "noop", Args: json.RawMessage(`{"a":1}`)}}},
				{Role: llm.RoleTool, Content: "ok", ToolCallID: "c1", ToolName: "noop", IsError: true},
				{Role: llm.RoleAssistant, Content: "ünïcode ✓"},
			}},
		Turns: []TurnMark{{ID: "t1", Messages: 4}},
		Pending: &PendingTurn{TurnID: "t2", Question: "may I?", Tool: "deploy",
			Checkpoint: agent.Checkpoint{Version: 1, ID: "cp-1", RunID: "run-1", Tools: []string{"deploy"}, Iteration: 1,
				Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "x", Name: "deploy", Args: json.RawMessage(`{}`)}}}},
				Results:  []*agent.CheckpointResult{nil}, Waiting: []agent.CheckpointWait{{Index: 0, Question: "may I?"}}}},
	}
}

func TestRecordCodecRoundTrips(t *testing.T) {
	for _, r := range []Record{{}, sampleRecord(), {Conversation: agent.Conversation{Version: 1}}} {
		data, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		// A record cut short, or with bytes left over, is corrupt.
		for _, bad := range [][]byte{data[:len(data)-1], append(slices.Clone(data), 0)} {
			if _, err := decodeRecord(bad); err != errCorruptRecord {
				t.Fatalf("a damaged record decoded: %v", err)
			}
		}
	}
}

// Decoding never panics, and what decodes encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []Record{{}, sampleRecord()} {
		data, _ := encodeRecord(r)
		f.Add(data)
	}
	f.Add([]byte{1, 1, 0, 255, 255, 255, 255, 15})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			return
		}
		again, err := encodeRecord(r)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		back, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("a re-encoded record does not decode: %v", err)
		}
		// The pending turn is JSON, whose decoding is lenient (field names
		// in any case, null for nothing): only its bytes must settle.
		third, _ := encodeRecord(back)
		if !bytes.Equal(third, again) {
			t.Fatal("re-encoding does not settle")
		}
		r.Pending, back.Pending = nil, nil
		if !reflect.DeepEqual(back, r) {
			t.Fatal("re-encoding changed the record")
		}
	})
}
