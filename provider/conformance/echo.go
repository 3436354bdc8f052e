package conformance

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/agentry-dev/agentry/provider"
)

// Echo is a host binding to lend in tests: one tool, [HostToolName],
// that answers {"echo": text} for {"text": text}, and counts what it was
// asked and how often it was released. The kit's host-binding checks lend
// it; a provider's own tests of lent tools can too.
type Echo struct {
	// hold, when set, is asked first about each invocation: it answers
	// it (ok) or lets it through to the echo.
	hold func(context.Context, provider.HostInvocation) (res provider.HostToolResult, ok bool, err error)

	mu       sync.Mutex
	calls    []provider.HostInvocation
	releases int
}

// Binding returns a binding that lends the tool, with instr (nil: none).
func (e *Echo) Binding(instr *provider.Instructions) *provider.HostBinding {
	return &provider.HostBinding{
		Tools: []provider.HostTool{{Name: HostToolName, Description: "Echoes its text back.", InputSchema: HostToolSchema,
			Invoke: e.invoke}},
		Instructions: instr,
		Release: func(context.Context) error {
			e.mu.Lock()
			e.releases++
			e.mu.Unlock()
			return nil
		},
	}
}

func (e *Echo) invoke(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
	if e.hold != nil {
		if res, ok, err := e.hold(ctx, inv); ok || err != nil {
			return res, err
		}
	}
	e.mu.Lock()
	e.calls = append(e.calls, inv)
	e.mu.Unlock()
	var in struct{ Text string }
	if err := json.Unmarshal(inv.Arguments, &in); err != nil {
		return provider.HostToolResult{}, err
	}
	out, err := json.Marshal(map[string]string{"echo": in.Text})
	return provider.HostToolResult{Output: out}, err
}

// Invocations returns the invocations the echo answered, in order.
func (e *Echo) Invocations() []provider.HostInvocation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]provider.HostInvocation(nil), e.calls...)
}

// Releases returns how often the binding was released.
func (e *Echo) Releases() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.releases
}
