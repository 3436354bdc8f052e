package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// Func builds a typed tool. The input JSON Schema is derived from In (its
// exported fields and json tags; fields without omitempty are required; a
// `jsonschema:"..."` tag is the field's description), and arguments are
// validated against it before fn runs. In must be a struct.
//
// What fn returns becomes the result's content: a string as is, a Result
// as is, anything else as JSON. An error from fn is returned from Call; the
// door turns it into an error result for the model.
//
// Func panics when In has no JSON Schema (a channel, a function, a cycle):
// that is a programming error, found the first time the program runs.
func Func[In, Out any](name, description string, fn func(context.Context, *Call, In) (Out, error)) Tool {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool.Func(%q): no JSON Schema for the input type: %v", name, err))
	}
	if s.Type != "object" {
		panic(fmt.Sprintf("tool.Func(%q): the input type must be a struct (a JSON object), not %q", name, s.Type))
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tool.Func(%q): %v", name, err))
	}
	v, err := NewValidator(name, raw)
	if err != nil {
		panic(fmt.Sprintf("tool.Func(%q): %v", name, err))
	}
	return &funcTool[In, Out]{spec: Spec{Name: name, Description: description, InputSchema: raw}, v: v, fn: fn}
}

type funcTool[In, Out any] struct {
	spec Spec
	v    *Validator
	fn   func(context.Context, *Call, In) (Out, error)
}

func (f *funcTool[In, Out]) Spec() Spec { return f.spec }

func (f *funcTool[In, Out]) Call(ctx context.Context, c *Call, args json.RawMessage) (Result, error) {
	if err := f.v.Validate(args); err != nil {
		return Result{}, err
	}
	var in In
	if len(args) > 0 {
		if err := json.Unmarshal(args, &in); err != nil {
			return Result{}, &ArgumentError{Tool: f.spec.Name, Problem: err.Error()}
		}
	}
	out, err := f.fn(ctx, c, in)
	if err != nil {
		return Result{}, err
	}
	switch o := any(out).(type) {
	case string:
		return Result{Content: o}, nil
	case Result:
		return o, nil
	case json.RawMessage:
		return Result{Content: string(o)}, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return Result{}, fmt.Errorf("tool %s: cannot encode the result: %w", f.spec.Name, err)
	}
	return Result{Content: string(b)}, nil
}

// WithCheckIn returns t with Spec().CheckIn set, so every call waits for a
// person's approval.
func WithCheckIn(t Tool) Tool { return checkIn{t} }

type checkIn struct{ Tool }

// Unwrap is the tool the check-in wraps ([WorkspaceOf]).
func (c checkIn) Unwrap() Tool { return c.Tool }

func (c checkIn) Spec() Spec {
	s := c.Tool.Spec()
	s.CheckIn = true
	return s
}
