package jsonerr_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/internal/jsonerr"
)

func TestDescribeNamesTheProblemWithoutTheInput(t *testing.T) {
	type target struct {
		Name string `json:"name"`
	}
	for _, c := range []struct{ in, want string }{
		{`{"name": "sk-secret"`, "not valid JSON"},
		{`{"name": 7}`, `field "name" has the wrong JSON type`},
		{`["sk-secret"]`, "not a JSON object"},
		{`{"sk-secret": 1}`, "a field target does not define"},
	} {
		dec := json.NewDecoder(bytes.NewReader([]byte(c.in)))
		dec.DisallowUnknownFields()
		var v target
		err := dec.Decode(&v)
		if err == nil {
			t.Fatalf("%s decoded", c.in)
		}
		got := jsonerr.Describe(err, "it has a field target does not define")
		if !strings.Contains(got, c.want) || strings.Contains(got, "sk-secret") {
			t.Errorf("Describe(%s) = %q, want it to say %q and not quote the input", c.in, got, c.want)
		}
	}
}
