package native_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/provider/native"
)

// FuzzParseSessionConfig: the parser never panics, accepts only what it
// can give back, and its errors never quote the input.
func FuzzParseSessionConfig(f *testing.F) {
	for _, s := range []string{
		``, `{}`, ` {} `, `null`, `[]`, `"x"`, `{"identity":null}`,
		`{"identity":{"tenant":"acme","principal":"alice"}}`,
		`{"identity":{"tenant":"acme","principal":"alice","conversationId":"c1"}}`,
		`{"identity":{"tenant":"acme","role":"admin"}}`, `{"identitty":{}}`, `{"identity":"acme"}`,
		`{"identity":{}} {}`, `{"identity":{"tenant":1}}`, `{`, `{"identity":{"tenant":"\u0000"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := native.ParseSessionConfig(json.RawMessage(in))
		if err != nil {
			var ce *native.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			// A marker in the input never shows in the error.
			if marked := strings.ReplaceAll(in, "acme", "QQmarkerQQ"); marked != in {
				if _, err := native.ParseSessionConfig(json.RawMessage(marked)); err != nil && strings.Contains(err.Error(), "QQmarkerQQ") {
					t.Fatalf("the error quotes the input: %v", err)
				}
			}
			return
		}
		again, err := native.ParseSessionConfig(cfg.JSON())
		if err != nil {
			t.Fatalf("the parser refuses its own output %s: %v", cfg.JSON(), err)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip %+v → %+v", cfg, again)
		}
	})
}
