package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Validator checks tool arguments against a JSON Schema. It is safe for
// concurrent use; build it once per tool.
type Validator struct {
	tool string
	rs   *jsonschema.Resolved
}

// NewValidator compiles schema for the named tool. An empty schema accepts
// any JSON object.
func NewValidator(toolName string, schema json.RawMessage) (*Validator, error) {
	v := &Validator{tool: toolName}
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("tool %s: input schema is not a JSON Schema: %w", toolName, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema does not resolve: %w", toolName, err)
	}
	v.rs = rs
	return v, nil
}

// Validate checks args. Empty args are read as {}. The error is an
// *ArgumentError naming the field that is wrong.
func (v *Validator) Validate(args json.RawMessage) error {
	_, err := v.decode(args)
	return err
}

func (v *Validator) decode(args json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	var inst any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&inst); err != nil {
		return nil, &ArgumentError{Tool: v.tool, Problem: "the arguments are not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &ArgumentError{Tool: v.tool, Problem: "the arguments hold more than one JSON value"}
	}
	inst = fromNumbers(inst)
	if _, ok := inst.(map[string]any); !ok {
		return nil, &ArgumentError{Tool: v.tool, Problem: fmt.Sprintf("the arguments must be a JSON object, not %s", jsonKind(inst))}
	}
	if err := v.rs.Validate(inst); err != nil {
		field, problem := explain(err)
		return nil, &ArgumentError{Tool: v.tool, Field: field, Problem: problem}
	}
	return inst, nil
}

// fromNumbers turns json.Number into float64 or int64 the validator knows.
func fromNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = fromNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fromNumbers(e)
		}
	}
	return v
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
}

// explain turns the validator's nested message into a field path and the
// innermost problem: "validating root: validating /properties/a: type: ..."
// becomes ("a", "type: ...").
func explain(err error) (field, problem string) {
	msg := err.Error()
	path := ""
	for {
		rest, ok := strings.CutPrefix(msg, "validating ")
		if !ok {
			break
		}
		loc, tail, found := strings.Cut(rest, ": ")
		if !found {
			break
		}
		if loc != "root" {
			path = loc
		}
		msg = tail
	}
	// Required and additional-property failures are reported at the object
	// that holds the field; name the field itself.
	for prefix, problem := range map[string]string{
		"required: missing properties: ":    "is required but missing",
		"unexpected additional properties ": "is not a known argument",
	} {
		if m, ok := strings.CutPrefix(msg, prefix); ok {
			names := quotedList(m)
			if len(names) == 0 {
				break
			}
			if len(names) > 1 {
				problem += "; so are " + strings.Join(names[1:], ", ")
			}
			return join(fieldPath(path), names[0]), problem
		}
	}
	return fieldPath(path), msg
}

// quotedList reads a Go-quoted string list such as ["a" "b"].
func quotedList(s string) []string {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]"))
	var out []string
	for s != "" {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return out
		}
		u, _ := strconv.Unquote(q)
		out = append(out, u)
		s = strings.TrimSpace(s[len(q):])
	}
	return out
}

func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// fieldPath turns a schema pointer (/properties/a/items/properties/b) into
// a.[].b.
func fieldPath(ptr string) string {
	var parts []string
	segs := strings.Split(strings.Trim(ptr, "/"), "/")
	for i := 0; i < len(segs); i++ {
		switch segs[i] {
		case "properties":
			if i+1 < len(segs) {
				parts = append(parts, segs[i+1])
				i++
			}
		case "items", "prefixItems":
			parts = append(parts, "[]")
		}
	}
	return strings.Join(parts, ".")
}

// ArgumentError says what is wrong with a tool's arguments, so the model
// can fix them and retry.
type ArgumentError struct {
	Tool    string
	Field   string // "" when the problem is with the arguments as a whole
	Problem string
}

func (e *ArgumentError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("invalid arguments for tool %s: %s", e.Tool, e.Problem)
	}
	return fmt.Sprintf("invalid arguments for tool %s: field %q: %s", e.Tool, e.Field, e.Problem)
}

// IsArgumentError reports whether err is (or wraps) an *ArgumentError.
func IsArgumentError(err error) bool {
	var ae *ArgumentError
	return errors.As(err, &ae)
}
