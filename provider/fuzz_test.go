package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

const fuzzSchema = `{"type":"object","properties":{"path":{"type":"string","maxLength":64},"n":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}}},"required":["path"]}`

// fuzzBinding opens one session lending one tool whose result the test
// chooses, and returns the provider's view of it.
func fuzzBinding(f *testing.F, result func(provider.HostInvocation) provider.HostToolResult, seen func(provider.HostInvocation)) provider.HostTools {
	p := newTprov()
	v, err := provider.Validate(p.caps, p.adapter())
	if err != nil {
		f.Fatal(err)
	}
	b := &provider.HostBinding{
		Tools: []provider.HostTool{{Name: "files", InputSchema: json.RawMessage(fuzzSchema),
			Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
				if seen != nil {
					seen(inv)
				}
				return result(inv), nil
			}}},
		Release: func(context.Context) error { return nil },
	}
	s, err := v.Create(context.Background(), provider.CreateRequest{SessionID: "fuzz", WorkingDirectory: "/", HostBinding: b})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close(context.Background(), "") })
	return p.lastHostTools()
}

// FuzzHostToolArguments: the facade lets through exactly the arguments the
// tool's schema accepts, and the host tool never sees any other.
func FuzzHostToolArguments(f *testing.F) {
	for _, s := range []string{`{"path":"a"}`, `{"path":"a","n":3,"tags":["x"]}`, `{}`, `{"path":1}`, `{"path":"a","n":-1}`,
		`[]`, `null`, ``, `{"path":"a"} {}`, `{"path":"` + strings.Repeat("x", 65) + `"}`, `{"path":"a","n":1.5}`} {
		f.Add([]byte(s))
	}
	validator, err := tool.NewValidator("files", json.RawMessage(fuzzSchema))
	if err != nil {
		f.Fatal(err)
	}
	var reached atomic.Pointer[[]byte]
	ht := fuzzBinding(f, func(provider.HostInvocation) provider.HostToolResult {
		return provider.HostToolResult{Output: json.RawMessage(`"ok"`)}
	}, func(inv provider.HostInvocation) {
		b := []byte(inv.Arguments)
		reached.Store(&b)
	})
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, args []byte) {
		reached.Store(nil)
		id := fmt.Sprintf("inv-%d", n.Add(1))
		res, err := ht.Invoke(context.Background(), provider.HostInvocation{ID: id, Tool: "files", Arguments: args})
		want := validator.Validate(args)
		switch {
		case want == nil && err != nil:
			t.Fatalf("valid arguments %q refused: %v", args, err)
		case want != nil && !provider.HasCode(err, provider.CodeHostToolInputInvalid):
			t.Fatalf("invalid arguments %q: err = %v", args, err)
		case want != nil && reached.Load() != nil:
			t.Fatalf("invalid arguments %q reached the host tool", args)
		case want == nil && string(res.Output) != `"ok"`:
			t.Fatalf("result %+v", res)
		}
	})
}

// FuzzHostToolResult: a result gets through exactly when
// CheckHostToolResult accepts it, and what gets through is one of output
// or error, valid, and at most 32 KiB of JSON.
func FuzzHostToolResult(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "", "", false)
	f.Add([]byte(``), "not_found", "no such file", true)
	f.Add([]byte(`{`), "", "", false)
	f.Add([]byte(`1`), "x", "y", true)
	f.Add([]byte(``), "Bad Code", "y", true)
	f.Add([]byte(``), "x", "", true)
	f.Add([]byte(`"`+strings.Repeat("x", 40000)+`"`), "", "", false)
	f.Add([]byte(`"<&>"`), "", "", false)
	var next atomic.Pointer[provider.HostToolResult]
	ht := fuzzBinding(f, func(provider.HostInvocation) provider.HostToolResult { return *next.Load() }, nil)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, output []byte, code, message string, isErr bool) {
		r := provider.HostToolResult{Output: output}
		if isErr {
			r.Error = &provider.HostToolError{Code: code, Message: message}
		}
		next.Store(&r)
		checkErr := provider.CheckHostToolResult(r)
		got, err := ht.Invoke(context.Background(), provider.HostInvocation{ID: fmt.Sprintf("r-%d", n.Add(1)), Tool: "files", Arguments: json.RawMessage(`{"path":"p"}`)})
		if (checkErr == nil) != (err == nil) {
			t.Fatalf("check says %v, invoke says %v", checkErr, err)
		}
		if err != nil {
			if !provider.HasCode(err, provider.CodeHostToolResultInvalid) {
				t.Fatalf("refusal without the code: %v", err)
			}
			return
		}
		if (got.Error == nil) == (len(got.Output) == 0) {
			t.Fatalf("not exactly one of output and error: %+v", got)
		}
		raw, err := json.Marshal(got)
		if err != nil || len(raw) > provider.MaxHostToolResultBytes {
			t.Fatalf("accepted %d bytes (%v)", len(raw), err)
		}
		if len(got.Output) > 0 && !json.Valid(got.Output) {
			t.Fatal("accepted invalid JSON")
		}
	})
}
