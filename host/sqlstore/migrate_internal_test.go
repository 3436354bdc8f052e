package sqlstore

import (
	"database/sql"
	"encoding/json"
	"testing"
)

// The upgrades read rows old releases wrote: whatever a stored head
// holds, they refuse it by name or make a head that is a JSON object of
// the shape the native record reads, and never panic.
func FuzzNativeHead(f *testing.F) {
	for _, s := range []string{`{"version":1,"identity":{"tenant":"acme","principal":"alice"}}`, `{}`, `[]`, `null`, `{"messages":[{"role":"user"}]}`, `{`} {
		f.Add(s, true)
	}
	f.Add("", false)
	f.Fuzz(func(t *testing.T, head string, valid bool) {
		b, err := nativeHead(sql.NullString{String: head, Valid: valid})
		if err != nil {
			return
		}
		var rec struct {
			Conversation map[string]json.RawMessage `json:"conversation"`
			Turns        []any                      `json:"turns"`
		}
		if err := json.Unmarshal(b, &rec); err != nil || rec.Conversation == nil || rec.Turns != nil || string(rec.Conversation["messages"]) != "null" {
			t.Fatalf("head %q made %s (%v)", head, b, err)
		}
	})
}

func FuzzMarksOutOfHead(f *testing.F) {
	for _, s := range []string{`{"conversation":{"version":1},"turns":[{"id":"t1","messages":2}]}`, `{"turns":null}`, `{"turns":[1]}`, `{"turns":{}}`, `[]`, `x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		b, marks, err := marksOutOfHead(head)
		if err != nil {
			return
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(b, &rec); err != nil || string(rec["turns"]) != "null" {
			t.Fatalf("head %q became %s (%v)", head, b, err)
		}
		var in struct {
			Turns []rowMark `json:"turns"`
		}
		_ = json.Unmarshal([]byte(head), &in)
		if len(in.Turns) != len(marks) {
			t.Fatalf("head %q: %d marks taken out, %d in it", head, len(marks), len(in.Turns))
		}
	})
}
