package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// lending lends Options.HostTools to provider sessions. Each session
// opening gets a fresh provider.HostBinding over the same tools; the
// binding's facade enforces the contract (claimed once, 16 in flight,
// arguments against the schema, 32 KiB results), and this side runs each
// invocation as one call: the call scope only, its tool sessions closed
// when it returns.
type lending struct {
	tools []tool.Tool
	bus   *event.Bus

	once sync.Once
	tier *toolsession.Tier
}

// maxLentResult is what a lent tool's text may be before it is cut, so the
// JSON result stays within the binding's 32 KiB.
const maxLentResult = 30 << 10

func newLending(tools []tool.Tool, bus *event.Bus) (*lending, error) {
	seen := map[string]bool{}
	for i, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("host: Options.HostTools[%d] is nil", i)
		}
		name := t.Spec().Name
		if seen[name] {
			return nil, fmt.Errorf("host: Options.HostTools has two tools named %q; lent tools need distinct names", name)
		}
		seen[name] = true
	}
	return &lending{tools: tools, bus: bus}, nil
}

func (l *lending) ensureTier() *toolsession.Tier {
	l.once.Do(func() {
		l.tier = toolsession.NewTier(toolsession.Config{Report: func(rep toolsession.Report) { l.bus.Export(tool.CloseEvent(rep)) }})
	})
	return l.tier
}

// binding is a new host binding for one session opening, or nil when the
// host lends nothing.
func (l *lending) binding(owner tool.Identity, sessionID string) *provider.HostBinding {
	if len(l.tools) == 0 {
		return nil
	}
	b := &provider.HostBinding{Release: func(context.Context) error { return nil }}
	for _, t := range l.tools {
		spec := t.Spec()
		b.Tools = append(b.Tools, provider.HostTool{
			Name:        spec.Name,
			Description: spec.Description,
			InputSchema: spec.InputSchema,
			Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
				return l.invoke(ctx, t, owner, sessionID, inv)
			},
		})
	}
	return b
}

// specs are the definitions of the tools lent, in order.
func (l *lending) specs() []provider.HostToolSpec {
	out := make([]provider.HostToolSpec, 0, len(l.tools))
	for _, t := range l.tools {
		spec := t.Spec()
		out = append(out, provider.HostToolSpec{Name: spec.Name, Description: spec.Description, InputSchema: spec.InputSchema})
	}
	return out
}

// lentScopes is what the lending door honours: a lent call has no run of
// the host's, so only the call itself can bound a session.
var lentScopes = []toolsession.Scope{toolsession.ScopeCall}

// invoke runs one lent call through tool.Invoke and maps its result: a
// tool that failed (or panicked) is the provider's host_tool_failed, with
// the error for the binding's OnToolError; an error result is a
// HostToolError the provider's agent reads.
func (l *lending) invoke(ctx context.Context, t tool.Tool, owner tool.Identity, sessionID string, inv provider.HostInvocation) (provider.HostToolResult, error) {
	name := t.Spec().Name
	// The provider's invocation id is unique only within its binding; the
	// call gets an id of its own, unique in the process, for the tier.
	var b [12]byte
	_, _ = rand.Read(b[:])
	callID := "lent-" + hex.EncodeToString(b[:])
	var registered atomic.Bool
	register := func(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
		out := l.ensureTier().Register(o, cleanup, opt)
		registered.Store(true)
		l.bus.Export(tool.SessionEvent(o, opt, out))
		return out
	}
	door := &tool.Door{Scopes: lentScopes, Register: register, Report: l.bus.Export, Hears: l.bus.Enabled, Events: l.bus.Export,
		Meta: event.Meta{SessionID: sessionID, Tenant: owner.Tenant, Principal: owner.Principal},
		Settle: func(id string) {
			if registered.Load() {
				l.tier.FireCall(context.WithoutCancel(ctx), id)
			}
		}}
	// The arguments were checked against the schema by the binding's
	// facade (provider.HostBinding), so the door checks nothing twice.
	out := tool.Invoke(ctx, door, tool.Request{Name: name, Tool: t, ToolCallID: callID, SessionID: sessionID, Args: inv.Arguments,
		Identity: &tool.Identity{Tenant: owner.Tenant, Principal: owner.Principal, ConversationID: sessionID}})
	switch {
	case out.Err != nil:
		return provider.HostToolResult{}, out.Err
	case out.Result.IsError:
		text := clipText(out.Result.Content, provider.MaxHostToolErrorMessage)
		return provider.HostToolResult{Error: &provider.HostToolError{Code: tool.ClassToolError, Message: text}}, nil
	}
	j, _ := json.Marshal(clipText(out.Result.Content, maxLentResult))
	return provider.HostToolResult{Output: j}, nil
}

// close closes what lent calls left (nothing, unless a tool registered
// from a goroutine it left behind).
func (l *lending) close(ctx context.Context) {
	if l.tier != nil {
		l.tier.FireShutdown(ctx)
	}
}

// clipText cuts s to at most max bytes (on a rune boundary) and says how
// much was cut.
func clipText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := fmt.Sprintf("\n[cut: %d of %d bytes shown]", max-64, len(s))
	cut := max - 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + note
}
