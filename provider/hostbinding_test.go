package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

const echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`

// hostSide is a host binding with counters.
type hostSide struct {
	b        *provider.HostBinding
	releases atomic.Int32
	relErr   func(n int) error
	invoked  atomic.Int32
	toolErrs atomic.Int32
}

func newHostSide(tools ...provider.HostTool) *hostSide {
	h := &hostSide{}
	if tools == nil {
		tools = []provider.HostTool{{Name: "echo", Description: "echoes", InputSchema: json.RawMessage(echoSchema),
			Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
				h.invoked.Add(1)
				return provider.HostToolResult{Output: inv.Arguments}, nil
			}}}
	}
	h.b = &provider.HostBinding{
		Tools: tools,
		Release: func(ctx context.Context) error {
			n := int(h.releases.Add(1))
			if h.relErr != nil {
				return h.relErr(n)
			}
			return nil
		},
		OnToolError: func(string, string, error) { h.toolErrs.Add(1) },
	}
	return h
}

func openBound(t testing.TB, v *provider.Validated, id string, b *provider.HostBinding) (*provider.ValidatedSession, error) {
	t.Helper()
	req := createReq(id)
	req.HostBinding = b
	s, err := v.Create(t.Context(), req)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func TestHostBindingClaimOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	v := p.validated(t)
	h := newHostSide()
	s, err := openBound(t, v, "s1", h.b)
	if err != nil {
		t.Fatal(err)
	}
	ht := p.lastHostTools()
	if ht == nil || len(ht.Tools()) != 1 || ht.Tools()[0].Name != "echo" {
		t.Fatalf("the provider did not get the tools: %v", ht)
	}
	_, err = openBound(t, v, "s2", h.b)
	wantCode(t, err, provider.CodeHostBindingReused)
	if n := p.calls.Load(); n != 1 {
		t.Fatalf("%d openings reached the provider", n)
	}
	// The facade cannot release what it does not own.
	wantCode(t, ht.Release(ctx), provider.CodeInvalidHostBinding)
	if h.releases.Load() != 0 {
		t.Fatal("released before close")
	}
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if n := h.releases.Load(); n != 1 {
		t.Fatalf("released %d times on close; want 1", n)
	}
	_, err = ht.Invoke(ctx, provider.HostInvocation{ID: "i", Tool: "echo", Arguments: json.RawMessage(`{"text":"x"}`)})
	wantCode(t, err, provider.CodeHostBindingClosed)
	s.Close(ctx, "")
	if n := h.releases.Load(); n != 1 {
		t.Fatalf("released %d times after a second close; want 1", n)
	}
}

func TestHostBindingUsedUpByAFailedOpening(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	p.create = func(context.Context, provider.CreateRequest) (provider.Session, error) { return nil, errors.New("no") }
	v := p.validated(t)
	h := newHostSide()
	if _, err := openBound(t, v, "s1", h.b); err == nil {
		t.Fatal("the opening succeeded")
	}
	if n := h.releases.Load(); n != 1 {
		t.Fatalf("a failed opening released the binding %d times; want 1", n)
	}
	p.create = nil
	_, err := openBound(t, v, "s2", h.b)
	wantCode(t, err, provider.CodeHostBindingReused)

	// A rejected candidate releases its binding too.
	p.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		_, s := p.newSession(req.SessionID, "b", req.HostTools) // no callback
		return s, nil
	}
	h2 := newHostSide()
	_, err = openBound(t, v, "s3", h2.b)
	wantCode(t, err, provider.CodeBindingCallbackMissing)
	if n := h2.releases.Load(); n != 1 {
		t.Fatalf("a rejected candidate's binding was released %d times; want 1", n)
	}
	_ = ctx
}

func TestHostBindingInitialisation(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, provider.HostInvocation) (provider.HostToolResult, error) {
		return provider.HostToolResult{Output: json.RawMessage(`1`)}, nil
	}
	tool := func(name, schema string) provider.HostTool {
		return provider.HostTool{Name: name, InputSchema: json.RawMessage(schema), Invoke: noop}
	}
	many := make([]provider.HostTool, 3)
	for i := range many {
		many[i] = tool(fmt.Sprintf("t%d", i), "")
	}
	for _, tc := range []struct {
		name  string
		caps  func(*provider.Capabilities)
		build func(b *provider.HostBinding)
		code  provider.Code
	}{
		{"unsupported", func(c *provider.Capabilities) { c.HostBinding = provider.HostBindingSupport{} }, nil, provider.CodeHostBindingUnsupported},
		{"placement unsupported", nil, func(b *provider.HostBinding) {
			b.Instructions = &provider.Instructions{Placement: provider.PlacementContext, Text: "be kind"}
		}, provider.CodeHostBindingUnsupported},
		{"too many tools", func(c *provider.Capabilities) { c.Limits.MaxHostTools = 2 }, func(b *provider.HostBinding) { b.Tools = many }, provider.CodeHostBindingUnsupported},
		{"unknown placement", nil, func(b *provider.HostBinding) {
			b.Instructions = &provider.Instructions{Placement: "footer", Text: "x"}
		}, provider.CodeInvalidHostBinding},
		{"empty instructions", nil, func(b *provider.HostBinding) {
			b.Instructions = &provider.Instructions{Placement: provider.PlacementSystem}
		}, provider.CodeInvalidHostBinding},
		{"lends nothing", nil, func(b *provider.HostBinding) { b.Tools = nil }, provider.CodeInvalidHostBinding},
		{"bad name", nil, func(b *provider.HostBinding) { b.Tools = []provider.HostTool{tool("no spaces", "")} }, provider.CodeInvalidHostBinding},
		{"no invoke", nil, func(b *provider.HostBinding) { b.Tools = []provider.HostTool{{Name: "x"}} }, provider.CodeInvalidHostBinding},
		{"array schema", nil, func(b *provider.HostBinding) { b.Tools = []provider.HostTool{tool("x", `{"type":"array"}`)} }, provider.CodeInvalidHostBinding},
		{"broken schema", nil, func(b *provider.HostBinding) { b.Tools = []provider.HostTool{tool("x", `{"type":`)} }, provider.CodeInvalidHostBinding},
		{"long description", nil, func(b *provider.HostBinding) {
			tl := tool("x", "")
			tl.Description = strings.Repeat("d", provider.MaxHostToolDescription+1)
			b.Tools = []provider.HostTool{tl}
		}, provider.CodeInvalidHostBinding},
		{"name conflict", nil, func(b *provider.HostBinding) { b.Tools = []provider.HostTool{tool("x", ""), tool("x", "")} }, provider.CodeHostToolNameConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newTprov()
			if tc.caps != nil {
				tc.caps(&p.caps)
			}
			h := newHostSide()
			if tc.build != nil {
				tc.build(h.b)
			}
			_, err := openBound(t, p.validated(t), "s", h.b)
			wantCode(t, err, tc.code)
			if p.calls.Load() != 0 {
				t.Fatal("the opening reached the provider")
			}
			if n := h.releases.Load(); n != 1 {
				t.Fatalf("the claimed binding was released %d times; want 1", n)
			}
		})
	}
	// A binding with no Release cannot be owned.
	p := newTprov()
	_, err := openBound(t, p.validated(t), "s", &provider.HostBinding{Tools: []provider.HostTool{tool("x", "")}})
	wantCode(t, err, provider.CodeInvalidHostBinding)

	// Instructions alone, in a supported placement, are fine.
	h := newHostSide()
	h.b.Tools = nil
	h.b.Instructions = &provider.Instructions{Placement: provider.PlacementSystem, Text: "answer in French"}
	s, err := openBound(t, p.validated(t), "s", h.b)
	if err != nil {
		t.Fatal(err)
	}
	if in := p.lastHostTools().Instructions(); in == nil || in.Text != "answer in French" {
		t.Fatalf("instructions %v", in)
	}
	s.Close(t.Context(), "")
}

func TestHostToolInvokeRules(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	var result provider.HostToolResult
	var resultErr error
	var panicking bool
	h := newHostSide(provider.HostTool{Name: "t", InputSchema: json.RawMessage(echoSchema),
		Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
			if panicking {
				panic("host tool bug")
			}
			return result, resultErr
		}})
	s, err := openBound(t, p.validated(t), "s", h.b)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx, "")
	ht := p.lastHostTools()
	call := func(id, args string) (provider.HostToolResult, error) {
		return ht.Invoke(ctx, provider.HostInvocation{ID: id, Tool: "t", Arguments: json.RawMessage(args)})
	}

	result = provider.HostToolResult{Output: json.RawMessage(`{"ok":true}`)}
	res, err := call("i1", `{"text":"hi"}`)
	if err != nil || string(res.Output) != `{"ok":true}` {
		t.Fatalf("%+v, %v", res, err)
	}

	for name, args := range map[string]string{
		"missing field": `{}`,
		"wrong type":    `{"text":1}`,
		"extra field":   `{"text":"x","y":1}`,
		"not json":      `{"text":`,
		"not an object": `["x"]`,
	} {
		_, err := call("i", args)
		if !provider.HasCode(err, provider.CodeHostToolInputInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err = ht.Invoke(ctx, provider.HostInvocation{ID: "i", Tool: "nope", Arguments: json.RawMessage(`{"text":"x"}`)})
	wantCode(t, err, provider.CodeHostToolInputInvalid)
	_, err = call(" bad id", `{"text":"x"}`)
	wantCode(t, err, provider.CodeHostToolInputInvalid)

	// A host tool's error or panic is an error result, and the host hears.
	resultErr = errors.New("database down: secret-dsn")
	res, err = call("i2", `{"text":"x"}`)
	if err != nil || res.Error == nil || res.Error.Code != string(provider.CodeHostToolFailed) {
		t.Fatalf("%+v, %v", res, err)
	}
	if strings.Contains(res.Error.Message, "secret") {
		t.Fatal("the host's error text reached the provider")
	}
	sawCode(provider.CodeHostToolFailed)
	resultErr = nil
	panicking = true
	res, err = call("i3", `{"text":"x"}`)
	if err != nil || res.Error == nil || res.Error.Code != string(provider.CodeHostToolFailed) {
		t.Fatalf("%+v, %v", res, err)
	}
	panicking = false
	if n := h.toolErrs.Load(); n != 2 {
		t.Fatalf("the host heard of %d tool failures; want 2", n)
	}

	// Malformed and oversized results are refused.
	for name, r := range map[string]provider.HostToolResult{
		"neither":      {},
		"both":         {Output: json.RawMessage(`1`), Error: &provider.HostToolError{Code: "x", Message: "y"}},
		"invalid json": {Output: json.RawMessage(`{`)},
		"bad code":     {Error: &provider.HostToolError{Code: "Bad Code", Message: "y"}},
		"no message":   {Error: &provider.HostToolError{Code: "x"}},
		"oversized":    {Output: json.RawMessage(`"` + strings.Repeat("x", provider.MaxHostToolResultBytes) + `"`)},
	} {
		result = r
		_, err := call("i4", `{"text":"x"}`)
		if !provider.HasCode(err, provider.CodeHostToolResultInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	sawCode(provider.CodeHostToolResultInvalid)
	result = provider.HostToolResult{Error: &provider.HostToolError{Code: "not_found", Message: "no such row"}}
	if res, err := call("i5", `{"text":"x"}`); err != nil || res.Error.Code != "not_found" {
		t.Fatalf("a well-formed error result: %+v, %v", res, err)
	}

	// A caller's cancelled context is refused up front.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ht.Invoke(cctx, provider.HostInvocation{ID: "i6", Tool: "t", Arguments: json.RawMessage(`{"text":"x"}`)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled invoke: %v", err)
	}
}

// blockingTool holds every invocation until its context ends or release
// is closed; it counts the most in flight at once.
type blockingTool struct {
	release  chan struct{}
	entered  chan string
	now, max atomic.Int32
	cancels  atomic.Int32
}

func newBlockingTool() *blockingTool {
	return &blockingTool{release: make(chan struct{}), entered: make(chan string, 1024)}
}

func (b *blockingTool) tool() provider.HostTool {
	return provider.HostTool{Name: "block", Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
		n := b.now.Add(1)
		defer b.now.Add(-1)
		for {
			m := b.max.Load()
			if n <= m || b.max.CompareAndSwap(m, n) {
				break
			}
		}
		b.entered <- inv.ID
		select {
		case <-b.release:
			return provider.HostToolResult{Output: json.RawMessage(`"done"`)}, nil
		case <-ctx.Done():
			b.cancels.Add(1)
			return provider.HostToolResult{}, context.Cause(ctx)
		}
	}}
}

func TestHostToolCapacityUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	bt := newBlockingTool()
	h := newHostSide(bt.tool())
	s, err := openBound(t, p.validated(t), "s", h.b)
	if err != nil {
		t.Fatal(err)
	}
	ht := p.lastHostTools()

	// Fill the binding to capacity.
	var wg sync.WaitGroup
	for i := range provider.MaxHostInvocations {
		wg.Go(func() {
			if _, err := ht.Invoke(ctx, provider.HostInvocation{ID: fmt.Sprintf("held-%d", i), Tool: "block"}); err != nil {
				t.Errorf("held invocation: %v", err)
			}
		})
	}
	for range provider.MaxHostInvocations {
		<-bt.entered
	}
	// A duplicate of an id in flight is refused as such.
	_, err = ht.Invoke(ctx, provider.HostInvocation{ID: "held-0", Tool: "block"})
	wantCode(t, err, provider.CodeHostToolInputInvalid)

	// Many goroutines pile on: every one is refused, none gets in.
	const extra = 64
	var refused atomic.Int32
	var pile sync.WaitGroup
	for i := range extra {
		pile.Go(func() {
			_, err := ht.Invoke(ctx, provider.HostInvocation{ID: fmt.Sprintf("extra-%d", i), Tool: "block"})
			if provider.HasCode(err, provider.CodeHostToolCapacityExhausted) {
				refused.Add(1)
			} else {
				t.Errorf("extra invocation: %v", err)
			}
		})
	}
	pile.Wait()
	sawCode(provider.CodeHostToolCapacityExhausted)
	if refused.Load() != extra {
		t.Fatalf("%d of %d extra invocations refused", refused.Load(), extra)
	}
	close(bt.release)
	wg.Wait()

	// Under churn the bound holds: many goroutines, each retrying until it
	// gets in, never more than 16 at once.
	var churn sync.WaitGroup
	for i := range 200 {
		churn.Go(func() {
			for {
				_, err := ht.Invoke(ctx, provider.HostInvocation{ID: fmt.Sprintf("churn-%d", i), Tool: "block"})
				if err == nil {
					return
				}
				if !provider.HasCode(err, provider.CodeHostToolCapacityExhausted) {
					t.Errorf("churn: %v", err)
					return
				}
			}
		})
	}
	churn.Wait()
	if m := bt.max.Load(); m != provider.MaxHostInvocations {
		t.Fatalf("at most %d were in flight; want exactly %d", m, provider.MaxHostInvocations)
	}
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseWaitsForInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		p := newTprov()
		// This tool ignores cancellation until told to finish: release must
		// still wait for it.
		finish := make(chan struct{})
		var running atomic.Int32
		var cancelled atomic.Int32
		h := newHostSide(provider.HostTool{Name: "slow", Invoke: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			if errors.Is(context.Cause(ctx), context.Canceled) || context.Cause(ctx) != nil {
				cancelled.Add(1)
			}
			<-finish
			return provider.HostToolResult{Output: json.RawMessage(`1`)}, nil
		}})
		var releasedWhileRunning atomic.Bool
		h.b.Release = func(context.Context) error {
			if running.Load() != 0 {
				releasedWhileRunning.Store(true)
			}
			h.releases.Add(1)
			return nil
		}
		s, err := openBound(t, p.validated(t), "s", h.b)
		if err != nil {
			t.Fatal(err)
		}
		ht := p.lastHostTools()
		var wg sync.WaitGroup
		for i := range provider.MaxHostInvocations {
			wg.Go(func() {
				ht.Invoke(ctx, provider.HostInvocation{ID: fmt.Sprint(i), Tool: "slow"})
			})
		}
		synctest.Wait()
		if running.Load() != provider.MaxHostInvocations {
			t.Fatalf("%d running", running.Load())
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx, "") }()
		synctest.Wait()
		// Every invocation's context was cancelled by the release, and the
		// host's Release has not run: the invocations are still in flight.
		if cancelled.Load() != provider.MaxHostInvocations {
			t.Fatalf("%d contexts cancelled by the release", cancelled.Load())
		}
		if h.releases.Load() != 0 {
			t.Fatal("Release ran while invocations were in flight")
		}
		// New invocations are refused while the release waits.
		_, err = ht.Invoke(ctx, provider.HostInvocation{ID: "late", Tool: "slow"})
		wantCode(t, err, provider.CodeHostBindingClosed)
		close(finish)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if h.releases.Load() != 1 || releasedWhileRunning.Load() {
			t.Fatalf("releases=%d, while running=%v", h.releases.Load(), releasedWhileRunning.Load())
		}
	})
}

func TestInvocationCancelledByCaller(t *testing.T) {
	t.Parallel()
	p := newTprov()
	bt := newBlockingTool()
	h := newHostSide(bt.tool())
	s, err := openBound(t, p.validated(t), "s", h.b)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan provider.HostToolResult)
	go func() {
		res, _ := p.lastHostTools().Invoke(ctx, provider.HostInvocation{ID: "i", Tool: "block"})
		done <- res
	}()
	<-bt.entered
	cancel()
	res := <-done
	if bt.cancels.Load() != 1 || res.Error == nil {
		t.Fatalf("cancels=%d, result %+v", bt.cancels.Load(), res)
	}
}

func TestReleaseFailureIsRetryable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	boom := errors.New("the host's store is down")
	p := newTprov()
	h := newHostSide()
	h.relErr = func(n int) error {
		if n == 1 {
			return boom
		}
		return nil
	}
	s, err := openBound(t, p.validated(t), "s", h.b)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Close(ctx, "")
	var hb *provider.HostBindingCleanupError
	var ce *provider.CleanupError
	if !errors.As(err, &hb) || !errors.As(err, &ce) || !errors.Is(err, boom) {
		t.Fatalf("err = %v; want a *HostBindingCleanupError that is also a *CleanupError", err)
	}
	wantCode(t, s.Err(), provider.CodeSessionUnusable)
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := hb.RetryCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if h.releases.Load() != 2 || p.session(0).closes.Load() != 1 {
		t.Fatalf("releases=%d provider closes=%d; want 2 and 1", h.releases.Load(), p.session(0).closes.Load())
	}
}

func TestOpeningFailureWithReleaseFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	openErr := errors.New("no quota")
	relErr := errors.New("release failed")
	p := newTprov()
	p.create = func(context.Context, provider.CreateRequest) (provider.Session, error) { return nil, openErr }
	h := newHostSide()
	h.relErr = func(n int) error {
		if n == 1 {
			return relErr
		}
		return nil
	}
	_, err := openBound(t, p.validated(t), "s", h.b)
	var hb *provider.HostBindingCleanupError
	if !errors.As(err, &hb) || !errors.Is(err, openErr) || !errors.Is(err, relErr) {
		t.Fatalf("err = %v", err)
	}
	if err := hb.RetryCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if h.releases.Load() != 2 {
		t.Fatalf("releases=%d", h.releases.Load())
	}
}

func TestAsTools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	h := newHostSide()
	s, err := openBound(t, p.validated(t), "s", h.b)
	if err != nil {
		t.Fatal(err)
	}
	tools := provider.AsTools(p.lastHostTools())
	if len(tools) != 1 || tools[0].Spec().Name != "echo" {
		t.Fatalf("%v", tools)
	}
	c := toolCall("call-1")
	res, err := tools[0].Call(ctx, c, json.RawMessage(`{"text":"hi"}`))
	if err != nil || res.IsError || res.Content != `{"text":"hi"}` {
		t.Fatalf("%+v, %v", res, err)
	}
	res, err = tools[0].Call(ctx, c, json.RawMessage(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Content, string(provider.CodeHostToolInputInvalid)) {
		t.Fatalf("%+v, %v", res, err)
	}
	s.Close(ctx, "")
	res, _ = tools[0].Call(ctx, c, json.RawMessage(`{"text":"hi"}`))
	if !res.IsError || !strings.Contains(res.Content, string(provider.CodeHostBindingClosed)) {
		t.Fatalf("after close: %+v", res)
	}
	if provider.AsTools(nil) != nil {
		t.Fatal("AsTools(nil)")
	}
}

// A host tool whose output is a JSON string reads as that text.
func TestAsToolsReadsAStringAsText(t *testing.T) {
	t.Parallel()
	p := newTprov()
	h := newHostSide(provider.HostTool{Name: "echo", Description: "says", InputSchema: json.RawMessage(echoSchema),
		Invoke: func(context.Context, provider.HostInvocation) (provider.HostToolResult, error) {
			return provider.HostToolResult{Output: json.RawMessage(`"six times seven is 42\n"`)}, nil
		}})
	if _, err := openBound(t, p.validated(t), "s", h.b); err != nil {
		t.Fatal(err)
	}
	res, err := provider.AsTools(p.lastHostTools())[0].Call(t.Context(), toolCall("call-1"), json.RawMessage(`{"text":"hi"}`))
	if err != nil || res.IsError || res.Content != "six times seven is 42\n" {
		t.Fatalf("%+v, %v", res, err)
	}
}

func toolCall(id string) *tool.Call { return tool.NewCall("echo", id, "run", "s", nil, nil, nil) }
