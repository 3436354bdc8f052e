package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/tool"
)

// Host binding limits.
const (
	// MaxHostInvocations is how many invocations of one binding's tools may
	// be in flight at once.
	MaxHostInvocations = 16
	// MaxHostToolResultBytes bounds a host tool's result, as JSON.
	MaxHostToolResultBytes = 32 << 10
	// MaxHostToolArgumentBytes bounds one invocation's arguments.
	MaxHostToolArgumentBytes = 1 << 20
	// MaxHostToolDescription bounds a tool description, in characters.
	MaxHostToolDescription = 4096
	// MaxHostToolSchemaBytes bounds a tool's input schema.
	MaxHostToolSchemaBytes = 64 << 10
	// MaxInstructionsBytes bounds a binding's instructions.
	MaxInstructionsBytes = 32 << 10
	// MaxHostToolErrorMessage bounds an error result's message, in bytes.
	MaxHostToolErrorMessage = 4096
)

// HostBinding is a set of host tools (and optional instructions) a host
// lends one provider session. Build a new one for every session opening:
// the first opening that receives it claims it, for ever, and the
// session's close (or the opening's failure) releases it.
//
// A HostBinding must not be copied after first use.
type HostBinding struct {
	Tools        []HostTool
	Instructions *Instructions
	// Release is called once the session no longer uses the binding and
	// every invocation has returned. Required. An error leaves the binding
	// unreleased; the cleanup error's RetryCleanup calls it again.
	Release func(ctx context.Context) error
	// OnToolError, if set, hears of a host tool that returned an error or
	// panicked (as a *PanicError): the provider only learns that the tool
	// failed (code host_tool_failed).
	OnToolError func(tool, invocationID string, err error)

	claimed atomic.Bool
}

// HostTool is one tool a host lends.
type HostTool struct {
	// Name matches ^[a-zA-Z0-9_-]{1,64}$ and is unique in the binding.
	Name        string
	Description string
	// InputSchema is a JSON Schema for an object; empty accepts any object.
	InputSchema json.RawMessage
	// Invoke runs the tool. ctx is cancelled when the provider's caller
	// gives up or the binding is released, whichever is first.
	Invoke func(ctx context.Context, inv HostInvocation) (HostToolResult, error)
}

// Instructions is text the host asks the provider to follow, and where it
// goes.
type Instructions struct {
	Placement Placement
	Text      string
}

// HostToolSpec describes a lent tool to the provider.
type HostToolSpec struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// HostInvocation is one call of a host tool.
type HostInvocation struct {
	// ID is an opaque id, unique among the binding's invocations in
	// flight (a model's tool-call id serves).
	ID        string
	Tool      string
	Arguments json.RawMessage
}

// HostToolResult is exactly one of an output or an error.
type HostToolResult struct {
	Output json.RawMessage `json:"output,omitempty"`
	Error  *HostToolError  `json:"error,omitempty"`
}

// HostToolError is a host tool's error result.
type HostToolError struct {
	// Code is shaped like a provider key (host_tool_failed when the host
	// tool failed or panicked).
	Code    string `json:"code"`
	Message string `json:"message"`
}

// HostTools is what a provider sees of a host binding. It is safe for
// concurrent use.
type HostTools interface {
	// Tools describes the lent tools, in the host's order.
	Tools() []HostToolSpec
	// Instructions returns the binding's instructions, or nil.
	Instructions() *Instructions
	// Invoke calls a host tool. Refusals are *ContractError: the binding is
	// closing (host_binding_closed); the tool is unknown, the arguments
	// fail its schema, or the id is malformed or already in flight
	// (host_tool_input_invalid); 16 are in flight
	// (host_tool_capacity_exhausted); the host returned a malformed or
	// oversized result (host_tool_result_invalid). A host tool that errors
	// or panics is an error result with code host_tool_failed.
	Invoke(ctx context.Context, inv HostInvocation) (HostToolResult, error)
	// Release is refused: only the session that owns the binding releases
	// it (invalid_host_binding).
	Release(ctx context.Context) error
}

// CheckHostToolResult reports whether r is a well-formed host tool result
// of at most 32 KiB of JSON.
func CheckHostToolResult(r HostToolResult) error {
	switch {
	case r.Error == nil && len(r.Output) == 0:
		return errors.New("the result has neither output nor error")
	case r.Error != nil && len(r.Output) > 0:
		return errors.New("the result has both output and error")
	case r.Error != nil:
		if err := CheckProviderKey(r.Error.Code); err != nil {
			return fmt.Errorf("the error code is malformed: %v", err)
		}
		m := r.Error.Message
		if m == "" || len(m) > MaxHostToolErrorMessage || !utf8.ValidString(m) {
			return fmt.Errorf("the error message must be 1 to %d bytes of UTF-8", MaxHostToolErrorMessage)
		}
	default:
		if len(r.Output) > MaxHostToolResultBytes*2 || !json.Valid(r.Output) {
			if len(r.Output) > MaxHostToolResultBytes*2 {
				return fmt.Errorf("the result is larger than %d bytes", MaxHostToolResultBytes)
			}
			return errors.New("the output is not valid JSON")
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("the result cannot be encoded: %v", err)
	}
	if len(b) > MaxHostToolResultBytes {
		return fmt.Errorf("the result is %d bytes of JSON; the limit is %d", len(b), MaxHostToolResultBytes)
	}
	return nil
}

// CheckHostToolName reports whether name can name a host tool.
func CheckHostToolName(name string) error {
	if name == "" || len(name) > 64 {
		return errors.New("a host tool name is 1 to 64 characters")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("a host tool name has only a-z, A-Z, 0-9, '_' and '-'; byte %d is not", i)
		}
	}
	return nil
}

// lease is a claimed host binding: the owner side. The facade is what
// the provider gets.
type lease struct {
	provider string
	binding  *HostBinding
	tools    []leasedTool
	byName   map[string]int
	instr    *Instructions

	life context.Context
	stop context.CancelCauseFunc

	mu       sync.Mutex
	stopped  bool
	inflight map[string]chan struct{}

	release *retrier
}

type leasedTool struct {
	spec      HostToolSpec
	validator *tool.Validator
	invoke    func(context.Context, HostInvocation) (HostToolResult, error)
}

var errBindingReleased = errors.New("the host binding was released")

// claim takes b for one session opening. It fails when b is nil-ish or
// already claimed; once claimed, the binding stays used up.
func claim(provider string, b *HostBinding) (*lease, error) {
	if b.Release == nil {
		return nil, violation(provider, CodeInvalidHostBinding, "the host binding has no Release function")
	}
	if !b.claimed.CompareAndSwap(false, true) {
		return nil, violation(provider, CodeHostBindingReused, "the host binding was already claimed by a session opening")
	}
	life, stop := context.WithCancelCause(context.Background())
	l := &lease{provider: provider, binding: b, life: life, stop: stop, inflight: map[string]chan struct{}{}}
	l.release = newRetrier(l.doRelease)
	return l, nil
}

// initialise checks the binding against what the adapter supports and
// builds the tools. A failure leaves the lease claimed; the caller
// releases it.
func (l *lease) initialise(caps Capabilities) error {
	b := l.binding
	if !caps.HostBinding.Supported {
		return violation(l.provider, CodeHostBindingUnsupported, "the provider does not accept host bindings")
	}
	if in := b.Instructions; in != nil {
		switch {
		case in.Placement != PlacementSystem && in.Placement != PlacementContext:
			return violation(l.provider, CodeInvalidHostBinding, "the instructions' placement must be %q or %q", PlacementSystem, PlacementContext)
		case !caps.supportsPlacement(in.Placement):
			return violation(l.provider, CodeHostBindingUnsupported, "the provider does not accept instructions placed %q", in.Placement)
		case in.Text == "" || len(in.Text) > MaxInstructionsBytes || !utf8.ValidString(in.Text):
			return violation(l.provider, CodeInvalidHostBinding, "the instructions must be 1 to %d bytes of UTF-8", MaxInstructionsBytes)
		}
		c := *in
		l.instr = &c
	}
	if len(b.Tools) == 0 && b.Instructions == nil {
		return violation(l.provider, CodeInvalidHostBinding, "the host binding lends no tools and no instructions")
	}
	if len(b.Tools) > caps.Limits.MaxHostTools {
		return violation(l.provider, CodeHostBindingUnsupported, "the host binding lends %d tools; the provider accepts at most %d", len(b.Tools), caps.Limits.MaxHostTools)
	}
	l.byName = make(map[string]int, len(b.Tools))
	for i, t := range b.Tools {
		if t.Invoke == nil && CheckHostToolName(t.Name) == nil {
			return violation(l.provider, CodeInvalidHostBinding, "host tool %q has no Invoke function", t.Name)
		}
		spec, v, err := checkHostTool(l.provider, i, HostToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}, l.byName)
		if err != nil {
			return err
		}
		l.byName[t.Name] = i
		l.tools = append(l.tools, leasedTool{spec: spec, validator: v, invoke: t.Invoke})
	}
	return nil
}

// checkHostTool checks the definition of the i-th lent tool (seen holds
// the names before it) and returns it as the provider sees it, its schema
// defaulted, with the validator of its arguments.
func checkHostTool(provider string, i int, t HostToolSpec, seen map[string]int) (HostToolSpec, *tool.Validator, error) {
	if err := CheckHostToolName(t.Name); err != nil {
		return HostToolSpec{}, nil, &ContractError{Provider: provider, Code: CodeInvalidHostBinding, Message: fmt.Sprintf("host tool %d has a malformed name", i), Err: err}
	}
	if _, dup := seen[t.Name]; dup {
		return HostToolSpec{}, nil, violation(provider, CodeHostToolNameConflict, "two host tools are named %q", t.Name)
	}
	if utf8.RuneCountInString(t.Description) > MaxHostToolDescription || !utf8.ValidString(t.Description) {
		return HostToolSpec{}, nil, violation(provider, CodeInvalidHostBinding, "host tool %q: the description must be at most %d characters of UTF-8", t.Name, MaxHostToolDescription)
	}
	schema, err := objectSchema(t.InputSchema)
	if err != nil {
		return HostToolSpec{}, nil, &ContractError{Provider: provider, Code: CodeInvalidHostBinding, Message: fmt.Sprintf("host tool %q has an unusable input schema", t.Name), Err: err}
	}
	v, err := tool.NewValidator(t.Name, schema)
	if err != nil {
		return HostToolSpec{}, nil, &ContractError{Provider: provider, Code: CodeInvalidHostBinding, Message: fmt.Sprintf("host tool %q has an unusable input schema", t.Name), Err: err}
	}
	return HostToolSpec{Name: t.Name, Description: t.Description, InputSchema: schema}, v, nil
}

// ExpectHostTools tells an adapter that prepares sessions ahead of need
// ([HostToolsExpecter]) the definitions of the tools the host lends every
// session it opens from now on; nil or empty: none. The definitions are
// checked as a host binding's are (a refusal is a *ContractError) and
// passed on as the provider sees them in a binding's [HostTools.Tools].
// A provider that does not accept host bindings, or prepares nothing
// ahead, is not told: each opening's binding still decides.
func (v *Validated) ExpectHostTools(tools []HostToolSpec) error {
	key := v.caps.ProviderKey
	if len(tools) > v.caps.Limits.MaxHostTools {
		return violation(key, CodeHostBindingUnsupported, "the host lends %d tools; the provider accepts at most %d", len(tools), v.caps.Limits.MaxHostTools)
	}
	out := make([]HostToolSpec, 0, len(tools))
	seen := make(map[string]int, len(tools))
	for i, t := range tools {
		spec, _, err := checkHostTool(key, i, t, seen)
		if err != nil {
			return err
		}
		seen[t.Name] = i
		out = append(out, spec)
	}
	e, ok := v.inner.(HostToolsExpecter)
	if !ok || !v.caps.HostBinding.Supported {
		return nil
	}
	e.ExpectHostTools(out)
	return nil
}

// objectSchema returns the schema, defaulted and checked to describe an
// object.
func objectSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	if len(raw) > MaxHostToolSchemaBytes {
		return nil, fmt.Errorf("the schema is %d bytes; the limit is %d", len(raw), MaxHostToolSchemaBytes)
	}
	var s struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, errors.New("the schema is not a JSON object")
	}
	if s.Type != "object" {
		return nil, errors.New(`the schema must have "type": "object"`)
	}
	return slices.Clone(raw), nil
}

// halt stops accepting invocations and cancels those in flight.
func (l *lease) halt() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.stop(errBindingReleased)
}

// doRelease halts, waits for the invocations in flight, then calls the
// host's Release.
func (l *lease) doRelease(ctx context.Context) error {
	l.halt()
	l.mu.Lock()
	waits := make([]chan struct{}, 0, len(l.inflight))
	for _, ch := range l.inflight {
		waits = append(waits, ch)
	}
	l.mu.Unlock()
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for host tool invocations to return: %w", context.Cause(ctx))
		}
	}
	return safely("the host binding's Release", func() error { return l.binding.Release(ctx) })
}

// facade is the provider's view.
type facade struct{ l *lease }

func (f facade) Tools() []HostToolSpec {
	out := make([]HostToolSpec, len(f.l.tools))
	for i, t := range f.l.tools {
		out[i] = t.spec
		out[i].InputSchema = slices.Clone(t.spec.InputSchema)
	}
	return out
}

func (f facade) Instructions() *Instructions {
	if f.l.instr == nil {
		return nil
	}
	c := *f.l.instr
	return &c
}

func (f facade) Release(context.Context) error {
	return violation(f.l.provider, CodeInvalidHostBinding, "only the session that owns a host binding may release it")
}

func (f facade) Invoke(ctx context.Context, inv HostInvocation) (HostToolResult, error) {
	l := f.l
	refuse := func(code Code, cause error, format string, args ...any) (HostToolResult, error) {
		return HostToolResult{}, &ContractError{Provider: l.provider, Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
	}
	if l.isStopped() {
		return refuse(CodeHostBindingClosed, nil, "the host binding no longer accepts invocations")
	}
	if err := CheckID(inv.ID); err != nil {
		return refuse(CodeHostToolInputInvalid, err, "the invocation id is malformed")
	}
	i, ok := l.byName[inv.Tool]
	if !ok {
		return refuse(CodeHostToolInputInvalid, nil, "the binding lends no tool by that name")
	}
	t := l.tools[i]
	if len(inv.Arguments) > MaxHostToolArgumentBytes {
		return refuse(CodeHostToolInputInvalid, nil, "the arguments are %d bytes; the limit is %d", len(inv.Arguments), MaxHostToolArgumentBytes)
	}
	if err := t.validator.Validate(inv.Arguments); err != nil {
		return refuse(CodeHostToolInputInvalid, err, "the arguments do not match the tool's schema")
	}
	if err := ctx.Err(); err != nil {
		return HostToolResult{}, context.Cause(ctx)
	}

	l.mu.Lock()
	switch {
	case l.stopped:
		l.mu.Unlock()
		return refuse(CodeHostBindingClosed, nil, "the host binding no longer accepts invocations")
	case l.inflight[inv.ID] != nil:
		l.mu.Unlock()
		return refuse(CodeHostToolInputInvalid, nil, "an invocation with this id is already in flight")
	case len(l.inflight) >= MaxHostInvocations:
		l.mu.Unlock()
		return refuse(CodeHostToolCapacityExhausted, nil, "%d invocations are in flight", MaxHostInvocations)
	}
	done := make(chan struct{})
	l.inflight[inv.ID] = done
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.inflight, inv.ID)
		l.mu.Unlock()
		close(done)
	}()

	ictx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unhook := context.AfterFunc(l.life, func() { cancel(context.Cause(l.life)) })
	defer unhook()

	call := HostInvocation{ID: inv.ID, Tool: inv.Tool, Arguments: slices.Clone(inv.Arguments)}
	var res HostToolResult
	err := safely("host tool "+inv.Tool, func() error {
		var err error
		res, err = t.invoke(ictx, call)
		return err
	})
	if err != nil {
		if h := l.binding.OnToolError; h != nil {
			_ = safely("OnToolError", func() error { h(inv.Tool, inv.ID, err); return nil })
		}
		return HostToolResult{Error: &HostToolError{Code: string(CodeHostToolFailed), Message: "the host tool failed without a result"}}, nil
	}
	if err := CheckHostToolResult(res); err != nil {
		return refuse(CodeHostToolResultInvalid, err, "host tool %q returned an unusable result", inv.Tool)
	}
	res.Output = slices.Clone(res.Output)
	if len(res.Output) == 0 {
		res.Output = nil
	}
	if res.Error != nil {
		e := *res.Error
		res.Error = &e
	}
	return res, nil
}

func (l *lease) isStopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopped
}

// inFlight is for tests and the conformance kit.
func (l *lease) inFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.inflight)
}

// AsTools adapts host tools to [tool.Tool]s, for a provider built on an
// agentry agent: each call invokes the host tool with the call's id as the
// invocation id, its output becomes the result's content (a JSON string
// as its text, any other JSON as written), and an error
// result or a refusal becomes an error result the model can read.
func AsTools(ht HostTools) []tool.Tool {
	if ht == nil {
		return nil
	}
	specs := ht.Tools()
	out := make([]tool.Tool, len(specs))
	for i, s := range specs {
		out[i] = hostTool{ht: ht, spec: s}
	}
	return out
}

type hostTool struct {
	ht   HostTools
	spec HostToolSpec
}

func (h hostTool) Spec() tool.Spec {
	return tool.Spec{Name: h.spec.Name, Description: h.spec.Description, InputSchema: slices.Clone(h.spec.InputSchema)}
}

func (h hostTool) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	res, err := h.ht.Invoke(ctx, HostInvocation{ID: c.ToolCallID, Tool: h.spec.Name, Arguments: args})
	if err != nil {
		var ce *ContractError
		if errors.As(err, &ce) {
			return tool.Result{Content: "the host refused the call: " + string(ce.Code), IsError: true}, nil
		}
		return tool.Result{}, err
	}
	if res.Error != nil {
		return tool.Result{Content: res.Error.Code + ": " + res.Error.Message, IsError: true}, nil
	}
	// An output that is a JSON string is text (the host lends run_code's
	// that way): the result is that text, not its quoted literal. An MCP
	// client may read a text result that parses as JSON as the tool's
	// structured output (Gemini CLI does, and wants an object there).
	var text string
	if json.Unmarshal(res.Output, &text) == nil {
		return tool.Result{Content: text}, nil
	}
	return tool.Result{Content: string(res.Output)}, nil
}
