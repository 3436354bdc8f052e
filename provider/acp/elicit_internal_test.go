package acp

import (
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/provider"
)

// FuzzFormField: reading a form's schema never panics; what it accepts is
// one string field with at most MaxInteractionOptions choices and a usable
// name; a refusal never repeats the agent's text.
func FuzzFormField(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"name":{"type":"string","description":"a file name"}},"required":["name"]}`,
		`{"properties":{"colour":{"type":"string","enum":["red","green","blue"]}}}`,
		`{"properties":{"colour":{"type":"string","oneOf":[{"const":"red","title":"Red"},{"const":"QQmarkerQQ"}]}}}`,
		`{"properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`,
		`{"properties":{"a":{"type":"string","QQmarkerQQ":1}}}`,
		`{"properties":{"a":{"type":"string","format":"email"}}}`,
		`{"properties":{"a":{"type":"object","properties":{"b":{"type":"string"}}}}}`,
		`{"properties":{"a":{"type":"string","enum":[1,2]}}}`,
		`{"properties":{"a":{"type":"string","enum":[]}}}`,
		`{"properties":{}}`, `{}`, `{"type":"array"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var s sdk.UnstableElicitationSchema
		if json.Unmarshal([]byte(in), &s) != nil {
			return
		}
		fld, err := formField(s)
		if err != nil {
			if strings.Contains(in, "QQmarkerQQ") && strings.Contains(err.Error(), "QQmarkerQQ") {
				t.Fatalf("the refusal quotes the agent: %v", err)
			}
			return
		}
		if len(s.Properties) != 1 || s.Properties[fld.name] == nil {
			t.Fatalf("accepted %d fields, or a field it does not name", len(s.Properties))
		}
		if provider.CheckID(fld.name) != nil {
			t.Fatalf("accepted an unusable field name %q", fld.name)
		}
		if len(fld.options) > provider.MaxInteractionOptions {
			t.Fatalf("accepted %d options", len(fld.options))
		}
		if typ, _ := s.Properties[fld.name].(map[string]any)["type"].(string); typ != "string" {
			t.Fatalf("accepted a field of type %q", typ)
		}
	})
}
