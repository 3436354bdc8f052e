// Package conformance is the test kit every provider adapter passes.
//
// [Run] drives a driver through every check of the contract, each as a
// subtest: materialise and readiness; create with exactly one binding
// callback; a turn to a stable boundary with well-formed outputs; resolve
// a request (when requests are declared); interrupt and steer (when
// declared); idempotent close; resume to an equal binding, a waiting turn
// that survives a close for shutdown, and branch to a new one (when
// declared); host bindings (claim, invoke, capacity, release on close;
// when declared); session interactions (when declared); idempotent
// registry disposal.
//
// The kit watches the adapter from between the validated wrapper and the
// adapter, so it sees what the provider received and every host tool
// invocation it attempted. A check that depends on another that failed is
// skipped, so a provider that breaks one rule fails one check. A check
// whose capability is not declared is skipped; a declared capability the
// fixture gives no prompt for fails, so a declaration is never untested.
//
// Every call is bounded by Fixture.Timeout through its context: the kit
// relies on an adapter honouring cancellation.
//
// The package also holds an in-memory fake provider ([NewFakeDriver]) that
// passes every check.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider"
)

// HostToolName is the tool the kit lends in host-binding checks; a
// fixture's HostToolPrompt must make the provider call it with arguments
// matching HostToolSchema.
const HostToolName = "conformance_echo"

// HostToolSchema is the kit tool's input schema.
var HostToolSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)

// Fixture says how to drive a provider through the checks.
type Fixture struct {
	// Definition materialises the instance under test. An empty ID is
	// "conformance"; an empty Provider is the driver's key.
	Definition provider.Definition
	// WorkingDirectory for every session (default: the system's temporary
	// directory).
	WorkingDirectory string
	// Configuration for every session.
	Configuration json.RawMessage
	// Prompt is a turn input the provider completes on its own. Required.
	Prompt string
	// RequestPrompt makes the provider raise a request (approval or
	// elicitation). Required when requests are declared.
	RequestPrompt string
	// ElicitationResponse answers an elicitation (default {}).
	ElicitationResponse json.RawMessage
	// InterruptPrompt is a turn that keeps running until interrupted.
	// Required when interrupt is declared.
	InterruptPrompt string
	// SteerPrompt is a turn that keeps running until steered, then
	// completes. Required when steer is declared.
	SteerPrompt string
	// SteerInput is what the kit steers with (default "conformance steer").
	SteerInput string
	// HostToolPrompt makes the provider call HostToolName once. Required
	// when host bindings are supported.
	HostToolPrompt string
	// InteractionPrompt is a turn during which the provider interacts
	// with the host (a question or a notice) and then completes. Required
	// when interactions are declared. The kit answers a question with
	// its first option, or "yes".
	InteractionPrompt string
	// Timeout bounds each check (default 10s).
	Timeout time.Duration
}

// The checks, in the order they run.
const (
	CheckMaterialize = "materialize"
	CheckCreate      = "create"
	CheckTurn        = "turn"
	CheckResolve     = "resolve"
	CheckInterrupt   = "interrupt"
	CheckSteer       = "steer"
	CheckClose       = "close"
	CheckResume      = "resume"
	CheckResumeWait  = "resume_pending"
	CheckBranch      = "branch"
	CheckHostClaim   = "host_binding/claim"
	CheckHostInvoke  = "host_binding/invoke"
	CheckHostCap     = "host_binding/capacity"
	CheckHostRelease = "host_binding/release"
	CheckInteract    = "interactions"
	CheckDispose     = "dispose"
)

type check struct {
	name     string
	needs    []string
	declared func(provider.Capabilities) bool
	run      func(*checker)
}

var checks = []check{
	{CheckMaterialize, nil, nil, checkMaterialize},
	{CheckCreate, []string{CheckMaterialize}, nil, checkCreate},
	{CheckTurn, []string{CheckCreate}, nil, checkTurn},
	{CheckResolve, []string{CheckTurn}, func(c provider.Capabilities) bool { return c.Requests.Approval || c.Requests.Elicitation }, checkResolve},
	{CheckInterrupt, []string{CheckTurn}, func(c provider.Capabilities) bool { return c.Turns.Interrupt }, checkInterrupt},
	{CheckSteer, []string{CheckTurn}, func(c provider.Capabilities) bool { return c.Turns.Steer }, checkSteer},
	{CheckClose, []string{CheckCreate}, nil, checkClose},
	{CheckResume, []string{CheckTurn, CheckClose}, func(c provider.Capabilities) bool { return c.Sessions.Resume }, checkResume},
	{CheckResumeWait, []string{CheckResolve, CheckResume}, func(c provider.Capabilities) bool { return c.Sessions.ResumePending }, checkResumePending},
	{CheckBranch, []string{CheckTurn}, func(c provider.Capabilities) bool { return c.Sessions.Branch == provider.BranchThroughTurn }, checkBranch},
	{CheckHostClaim, []string{CheckCreate}, hostBindings, checkHostClaim},
	{CheckHostInvoke, []string{CheckHostClaim, CheckTurn}, hostBindings, checkHostInvoke},
	{CheckHostCap, []string{CheckHostInvoke}, hostBindings, checkHostCapacity},
	{CheckHostRelease, []string{CheckHostClaim}, hostBindings, checkHostRelease},
	{CheckInteract, []string{CheckTurn, CheckClose}, func(c provider.Capabilities) bool { return len(c.Interactions.Kinds) > 0 }, checkInteractions},
	{CheckDispose, []string{CheckMaterialize}, nil, checkDispose},
}

func hostBindings(c provider.Capabilities) bool { return c.HostBinding.Supported }

// Checks lists the checks' names in the order they run.
func Checks() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

// Status is a check's outcome.
type Status string

const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Result is one check's outcome and what it said.
type Result struct {
	Check    string
	Status   Status
	Messages []string
}

// Report is every check's result, in order.
type Report struct {
	Results []Result
}

// Failed lists the checks that failed.
func (r Report) Failed() []string {
	var out []string
	for _, res := range r.Results {
		if res.Status == Failed {
			out = append(out, res.Check)
		}
	}
	return out
}

// Result returns the named check's result.
func (r Report) Result(name string) (Result, bool) {
	for _, res := range r.Results {
		if res.Check == name {
			return res, true
		}
	}
	return Result{}, false
}

// Run runs every check against driver, each as a subtest of t.
func Run(t *testing.T, driver provider.Driver, fixture Fixture) {
	t.Helper()
	evaluate(t.Context(), driver, fixture, func(name string, run func() Result) {
		t.Run(name, func(t *testing.T) {
			res := run()
			for _, m := range res.Messages {
				if res.Status == Failed {
					t.Error(m)
				} else {
					t.Log(m)
				}
			}
			if res.Status == Skipped {
				t.SkipNow()
			}
		})
	})
}

// Evaluate runs every check and reports, without a testing.T: for a
// command that vets an adapter, or a test that asserts which check fails.
func Evaluate(ctx context.Context, driver provider.Driver, fixture Fixture) Report {
	var rep Report
	evaluate(ctx, driver, fixture, func(_ string, run func() Result) { rep.Results = append(rep.Results, run()) })
	return rep
}

func evaluate(ctx context.Context, driver provider.Driver, f Fixture, each func(string, func() Result)) {
	f = f.withDefaults(driver)
	status := map[string]Status{}
	var caps *provider.Capabilities
	for _, ch := range checks {
		each(ch.name, func() Result {
			res := runCheck(ctx, ch, driver, f, status, caps)
			status[ch.name] = res.Status
			return res
		})
		if ch.name == CheckMaterialize && status[ch.name] == Passed {
			caps = capsOf(ctx, driver, f)
		}
	}
}

func (f Fixture) withDefaults(d provider.Driver) Fixture {
	if f.Definition.ID == "" {
		f.Definition.ID = "conformance"
	}
	if f.Definition.Provider == "" && d != nil {
		f.Definition.Provider = d.ProviderKey()
	}
	if f.WorkingDirectory == "" {
		f.WorkingDirectory = filepath.Clean(os.TempDir())
	}
	if len(f.ElicitationResponse) == 0 {
		f.ElicitationResponse = json.RawMessage(`{}`)
	}
	if f.SteerInput == "" {
		f.SteerInput = "conformance steer"
	}
	if f.Timeout <= 0 {
		f.Timeout = 10 * time.Second
	}
	return f
}

// capsOf materialises once to read the declaration that decides which
// checks apply.
func capsOf(ctx context.Context, d provider.Driver, f Fixture) *provider.Capabilities {
	r, err := provider.OpenRegistry(ctx, []provider.Driver{d}, []provider.Definition{f.Definition})
	if err != nil {
		return nil
	}
	defer r.Dispose(context.WithoutCancel(ctx))
	inst, err := r.Instance(f.Definition.ID)
	if err != nil {
		return nil
	}
	c := inst.Capabilities()
	return &c
}

// abort ends a check early (fatal or skip).
type abort struct{}

type checker struct {
	ctx      context.Context
	driver   provider.Driver
	spy      *spyState
	f        Fixture
	caps     provider.Capabilities
	status   Status
	msgs     []string
	cleanups []func()
	n        atomic.Int64
}

func runCheck(ctx context.Context, ch check, d provider.Driver, f Fixture, done map[string]Status, caps *provider.Capabilities) Result {
	res := Result{Check: ch.name, Status: Passed}
	for _, need := range ch.needs {
		if done[need] != Passed {
			res.Status = Skipped
			res.Messages = []string{fmt.Sprintf("skipped: it needs check %q, which did not pass", need)}
			return res
		}
	}
	if ch.declared != nil {
		if caps == nil {
			res.Status = Skipped
			res.Messages = []string{"skipped: the capabilities could not be read"}
			return res
		}
		if !ch.declared(*caps) {
			res.Status = Skipped
			res.Messages = []string{"skipped: the provider does not declare it"}
			return res
		}
	}
	cctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	c := &checker{ctx: cctx, spy: &spyState{}, f: f, status: Passed}
	if d == nil {
		c.status = Failed
		c.msgs = []string{"the driver is nil"}
	} else {
		c.driver = spyDriver{d, c.spy}
		if caps != nil {
			c.caps = *caps
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(abort); !ok {
						c.errorf("the check panicked: %v", r)
					}
				}
			}()
			ch.run(c)
		}()
	}
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
	res.Status, res.Messages = c.status, c.msgs
	return res
}

func (c *checker) errorf(format string, args ...any) {
	c.status = Failed
	c.msgs = append(c.msgs, fmt.Sprintf(format, args...))
}

func (c *checker) fatalf(format string, args ...any) {
	c.errorf(format, args...)
	panic(abort{})
}

func (c *checker) cleanup(fn func()) { c.cleanups = append(c.cleanups, fn) }

// require fails the check when the fixture lacks what a declared
// capability needs.
func (c *checker) require(field, value string) {
	if strings.TrimSpace(value) == "" {
		c.fatalf("the fixture has no %s, and the provider declares what it exercises", field)
	}
}

// id returns a fresh opaque id with prefix.
func (c *checker) id(prefix string) string { return fmt.Sprintf("%s-%d", prefix, c.n.Add(1)) }

// instance opens a registry holding the fixture's instance; it is disposed
// when the check ends.
func (c *checker) instance() *provider.Instance {
	r, err := provider.OpenRegistry(c.ctx, []provider.Driver{c.driver}, []provider.Definition{c.f.Definition})
	if err != nil {
		c.fatalf("materialising the instance: %v", err)
	}
	c.cleanup(func() { r.Dispose(context.WithoutCancel(c.ctx)) })
	inst, err := r.Instance(c.f.Definition.ID)
	if err != nil {
		c.fatalf("looking up the instance: %v", err)
	}
	return inst
}

// open creates a session (with b lent, if any) and closes it when the
// check ends. told receives the bindings the host heard of.
func (c *checker) open(inst *provider.Instance, b *provider.HostBinding, told *[]provider.Binding) *provider.ValidatedSession {
	var mu sync.Mutex
	req := provider.CreateRequest{SessionID: c.id("conformance-session"), WorkingDirectory: c.f.WorkingDirectory,
		Configuration: c.f.Configuration, HostBinding: b,
		OnBinding: func(x provider.Binding) {
			mu.Lock()
			defer mu.Unlock()
			if told != nil {
				*told = append(*told, x)
			}
		}}
	s, err := inst.Adapter().Create(c.ctx, req)
	if err != nil {
		c.fatalf("creating a session: %v", err)
	}
	vs := s
	c.adopt(vs)
	return vs
}

func (c *checker) adopt(s *provider.ValidatedSession) {
	c.cleanup(func() { s.Close(context.WithoutCancel(c.ctx), provider.CloseRequested) })
}

// turn runs one turn to its boundary and returns its outputs.
func (c *checker) turn(s *provider.ValidatedSession, turnID, input string) []provider.Output {
	return c.pull(s.RunTurn(c.ctx, provider.TurnRequest{TurnID: turnID, Input: input}), "turn "+turnID)
}

func (c *checker) pull(seq iter.Seq2[provider.Output, error], what string) []provider.Output {
	var outs []provider.Output
	for o, err := range seq {
		if err != nil {
			c.fatalf("%s: %v", what, err)
		}
		outs = append(outs, o)
	}
	if len(outs) == 0 {
		c.fatalf("%s produced no outputs", what)
	}
	return outs
}

// completes requires a turn that ended at turn.completed.
func (c *checker) completes(outs []provider.Output, what string) {
	last := outs[len(outs)-1]
	if last.Kind != provider.OutputTurnCompleted {
		c.fatalf("%s ended at %s, not turn.completed", what, last.Kind)
	}
}

func checkMaterialize(c *checker) {
	inst := c.instance()
	if got, want := inst.ProviderKey(), c.driver.ProviderKey(); got != want {
		c.errorf("the instance declares provider %q; the driver is %q", got, want)
	}
	rd, err := inst.Readiness(c.ctx)
	if err != nil {
		c.fatalf("readiness: %v", err)
	}
	if rd != provider.Ready {
		c.errorf("the instance reports %s; the kit needs a ready instance", rd)
	}
}

func checkCreate(c *checker) {
	inst := c.instance()
	var told []provider.Binding
	s := c.open(inst, nil, &told)
	if len(told) != 1 {
		c.fatalf("the host heard %d bindings during create; want exactly 1", len(told))
	}
	if told[0] != s.Binding() {
		c.errorf("the binding the host heard differs from the session's")
	}
	if err := s.Err(); err != nil {
		c.errorf("a new session is not usable: %v", err)
	}
}

func checkTurn(c *checker) {
	c.require("Prompt", c.f.Prompt)
	s := c.open(c.instance(), nil, nil)
	for _, id := range []string{"turn-1", "turn-2"} {
		outs := c.turn(s, id, c.f.Prompt)
		if outs[0].Kind != provider.OutputTurnStarted {
			c.errorf("%s began with %s", id, outs[0].Kind)
		}
		c.completes(outs, id)
	}
}

func checkResolve(c *checker) {
	c.require("RequestPrompt", c.f.RequestPrompt)
	s := c.open(c.instance(), nil, nil)
	outs := c.turn(s, "turn-1", c.f.RequestPrompt)
	for range 8 {
		last := outs[len(outs)-1]
		if last.Kind == provider.OutputTurnCompleted {
			break
		}
		if last.Kind != provider.OutputRequest {
			c.fatalf("the turn ended at %s, not a request", last.Kind)
		}
		res := provider.Resolution{TurnID: "turn-1", RequestID: last.Request.ID, Approve: true}
		if last.Request.Kind == provider.RequestElicitation {
			res.Response = c.f.ElicitationResponse
		}
		outs = c.pull(s.Resolve(c.ctx, res), "resolving request")
	}
	c.completes(outs, "the resolved turn")
	if err := s.Err(); err != nil {
		c.errorf("after resolving: %v", err)
	}
}

func checkInterrupt(c *checker) {
	c.require("InterruptPrompt", c.f.InterruptPrompt)
	s := c.open(c.instance(), nil, nil)
	next, stop := iter.Pull2(s.RunTurn(c.ctx, provider.TurnRequest{TurnID: "turn-1", Input: c.f.InterruptPrompt}))
	defer stop()
	o, err, ok := next()
	if err != nil || !ok || o.Kind != provider.OutputTurnStarted {
		c.fatalf("the turn to interrupt did not start: %v", err)
	}
	if err := s.Interrupt(c.ctx, "turn-1"); err != nil {
		c.fatalf("interrupt: %v", err)
	}
	var last provider.Output
	for {
		o, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			c.fatalf("the interrupted turn did not reach turn.completed: %v", err)
		}
		last = o
	}
	if last.Kind != provider.OutputTurnCompleted {
		c.fatalf("the interrupted turn ended at %q", last.Kind)
	}
	c.completes(c.turn(s, "turn-2", c.f.Prompt), "the turn after the interrupt")

	// A turn waiting on a request can be interrupted too.
	if (c.caps.Requests.Approval || c.caps.Requests.Elicitation) && c.f.RequestPrompt != "" {
		outs := c.turn(s, "turn-3", c.f.RequestPrompt)
		if outs[len(outs)-1].Kind == provider.OutputRequest {
			if err := s.Interrupt(c.ctx, "turn-3"); err != nil {
				c.fatalf("interrupting a waiting turn: %v", err)
			}
			c.completes(c.turn(s, "turn-4", c.f.Prompt), "the turn after interrupting a waiting one")
		}
	}
}

func checkSteer(c *checker) {
	c.require("SteerPrompt", c.f.SteerPrompt)
	s := c.open(c.instance(), nil, nil)
	next, stop := iter.Pull2(s.RunTurn(c.ctx, provider.TurnRequest{TurnID: "turn-1", Input: c.f.SteerPrompt}))
	defer stop()
	o, err, ok := next()
	if err != nil || !ok || o.Kind != provider.OutputTurnStarted {
		c.fatalf("the turn to steer did not start: %v", err)
	}
	if err := s.Steer(c.ctx, provider.SteerRequest{TurnID: "turn-1", Input: c.f.SteerInput}); err != nil {
		c.fatalf("steer: %v", err)
	}
	var last provider.Output
	for {
		o, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			c.fatalf("the steered turn: %v", err)
		}
		last = o
	}
	if last.Kind != provider.OutputTurnCompleted {
		c.fatalf("the steered turn ended at %q", last.Kind)
	}
}

func checkClose(c *checker) {
	s := c.open(c.instance(), nil, nil)
	if err := s.Close(c.ctx, provider.CloseRequested); err != nil {
		c.fatalf("close: %v", err)
	}
	if err := s.Close(c.ctx, provider.CloseRequested); err != nil {
		c.errorf("a second close: %v", err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionClosed) {
		c.errorf("after close the session says %v", s.Err())
	}
}

func checkResume(c *checker) {
	inst := c.instance()
	s := c.open(inst, nil, nil)
	c.completes(c.turn(s, "turn-1", c.f.Prompt), "the first turn")
	b := s.Binding()
	if err := s.Close(c.ctx, provider.CloseRequested); err != nil {
		c.fatalf("closing before resuming: %v", err)
	}
	rs, err := inst.Adapter().Resume(c.ctx, provider.ResumeRequest{SessionID: c.id("conformance-resumed"),
		WorkingDirectory: c.f.WorkingDirectory, Configuration: c.f.Configuration, Binding: b})
	if err != nil {
		c.fatalf("resume: %v", err)
	}
	c.adopt(rs)
	if rs.Binding() != b {
		c.errorf("the resumed session has another binding")
	}
	c.completes(c.turn(rs, "turn-2", c.f.Prompt), "the turn after resuming")
}

// checkResumePending closes a session whose turn waits on a request (as
// a host does at shutdown), resumes it, and answers the request there.
func checkResumePending(c *checker) {
	c.require("RequestPrompt", c.f.RequestPrompt)
	inst := c.instance()
	s := c.open(inst, nil, nil)
	outs := c.turn(s, "turn-1", c.f.RequestPrompt)
	asked := outs[len(outs)-1]
	if asked.Kind != provider.OutputRequest {
		c.fatalf("the request prompt's turn ended at %s, not a request", asked.Kind)
	}
	if err := s.Close(c.ctx, provider.CloseShutdown); err != nil {
		c.fatalf("closing the waiting session for a shutdown: %v", err)
	}
	rs, err := inst.Adapter().Resume(c.ctx, provider.ResumeRequest{SessionID: c.id("conformance-resumed"),
		WorkingDirectory: c.f.WorkingDirectory, Configuration: c.f.Configuration, Binding: s.Binding()})
	if err != nil {
		c.fatalf("resume: %v", err)
	}
	c.adopt(rs)
	turnID, req, ok := rs.Pending()
	switch {
	case !ok:
		c.fatalf("the resumed session is not waiting; its turn waited on a request when the session closed")
	case turnID != "turn-1" || req.ID != asked.Request.ID || req.Kind != asked.Request.Kind:
		c.fatalf("the resumed session waits on another request than the one its turn raised")
	}
	res := provider.Resolution{TurnID: turnID, RequestID: req.ID, Approve: true}
	if req.Kind == provider.RequestElicitation {
		res.Response = c.f.ElicitationResponse
	}
	outs = c.pull(rs.Resolve(c.ctx, res), "resolving the resumed request")
	for range 8 {
		last := outs[len(outs)-1]
		if last.Kind != provider.OutputRequest {
			break
		}
		res := provider.Resolution{TurnID: turnID, RequestID: last.Request.ID, Approve: true}
		if last.Request.Kind == provider.RequestElicitation {
			res.Response = c.f.ElicitationResponse
		}
		outs = c.pull(rs.Resolve(c.ctx, res), "resolving a further request")
	}
	c.completes(outs, "the resumed turn")
	c.completes(c.turn(rs, "turn-2", c.f.Prompt), "the turn after the resumed one")
}

func checkBranch(c *checker) {
	inst := c.instance()
	src := c.open(inst, nil, nil)
	c.completes(c.turn(src, "turn-1", c.f.Prompt), "the source's turn")
	var told []provider.Binding
	var mu sync.Mutex
	br, err := inst.Adapter().Branch(c.ctx, provider.BranchRequest{SessionID: c.id("conformance-branch"),
		WorkingDirectory: c.f.WorkingDirectory, Configuration: c.f.Configuration,
		Source: provider.BranchSource{Binding: src.Binding(), TurnID: "turn-1"},
		OnBinding: func(b provider.Binding) {
			mu.Lock()
			told = append(told, b)
			mu.Unlock()
		}})
	if err != nil {
		c.fatalf("branch: %v", err)
	}
	c.adopt(br)
	if len(told) != 1 || told[0] != br.Binding() {
		c.errorf("the host heard %d bindings for the branch; want its own, once", len(told))
	}
	if br.Binding() == src.Binding() {
		c.errorf("the branch has its source's binding")
	}
	c.completes(c.turn(br, "turn-2", c.f.Prompt), "the branch's turn")
	c.completes(c.turn(src, "turn-2", c.f.Prompt), "the source's turn after branching")
}

// kitBinding is the host binding the kit lends: the Echo, whose
// invocations with an id starting "kit-hold" wait until the kit lets them go.
type kitBinding struct {
	b      *provider.HostBinding
	echo   *Echo
	hold   chan struct{}
	held   chan struct{}
	unhold sync.Once
}

func (k *kitBinding) letGo() { k.unhold.Do(func() { close(k.hold) }) }

func (c *checker) binding() *kitBinding {
	k := &kitBinding{hold: make(chan struct{}), held: make(chan struct{}, provider.MaxHostInvocations)}
	c.cleanup(k.letGo)
	k.echo = &Echo{hold: func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, bool, error) {
		if !strings.HasPrefix(inv.ID, "kit-hold") {
			return provider.HostToolResult{}, false, nil
		}
		k.held <- struct{}{}
		select {
		case <-k.hold:
		case <-ctx.Done():
			return provider.HostToolResult{}, true, context.Cause(ctx)
		}
		return provider.HostToolResult{Output: json.RawMessage(`"released"`)}, true, nil
	}}
	var instr *provider.Instructions
	if p := c.caps.HostBinding.InstructionPlacements; len(p) > 0 {
		instr = &provider.Instructions{Placement: p[0], Text: "Use " + HostToolName + " when asked to."}
	}
	k.b = k.echo.Binding(instr)
	return k
}

func checkHostClaim(c *checker) {
	inst := c.instance()
	k := c.binding()
	c.open(inst, k.b, nil)
	ht := c.spy.lastTools()
	if ht == nil {
		c.fatalf("the provider received no host tools")
	}
	if specs := ht.Tools(); len(specs) != 1 || specs[0].Name != HostToolName {
		c.errorf("the provider's host tools do not list %s", HostToolName)
	}
	_, err := inst.Adapter().Create(c.ctx, provider.CreateRequest{SessionID: c.id("conformance-reuse"),
		WorkingDirectory: c.f.WorkingDirectory, Configuration: c.f.Configuration, HostBinding: k.b})
	if !provider.HasCode(err, provider.CodeHostBindingReused) {
		c.errorf("a second opening with the same binding: %v; want %s", err, provider.CodeHostBindingReused)
	}
}

func checkHostInvoke(c *checker) {
	c.require("HostToolPrompt", c.f.HostToolPrompt)
	k := c.binding()
	s := c.open(c.instance(), k.b, nil)
	c.completes(c.turn(s, "turn-1", c.f.HostToolPrompt), "the host-tool turn")
	if len(k.echo.Invocations()) == 0 {
		c.errorf("the provider did not invoke %s during the host-tool turn", HostToolName)
	}
	for _, a := range c.spy.attemptList() {
		if a.code != "" {
			c.errorf("the provider's invocation of %s was refused: %s", a.tool, a.code)
		}
	}
}

func checkHostCapacity(c *checker) {
	k := c.binding()
	s := c.open(c.instance(), k.b, nil)
	ht := c.spy.lastTools()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer k.letGo()
	for i := range provider.MaxHostInvocations {
		wg.Go(func() {
			ht.Invoke(c.ctx, provider.HostInvocation{ID: fmt.Sprintf("kit-hold-%d", i), Tool: HostToolName, Arguments: json.RawMessage(`{"text":"hold"}`)})
		})
	}
	for range provider.MaxHostInvocations {
		select {
		case <-k.held:
		case <-c.ctx.Done():
			c.fatalf("the binding did not take %d invocations", provider.MaxHostInvocations)
		}
	}
	_, err := ht.Invoke(c.ctx, provider.HostInvocation{ID: "kit-over", Tool: HostToolName, Arguments: json.RawMessage(`{"text":"x"}`)})
	if !provider.HasCode(err, provider.CodeHostToolCapacityExhausted) {
		c.errorf("invocation %d: %v; want %s", provider.MaxHostInvocations+1, err, provider.CodeHostToolCapacityExhausted)
	}
	// The provider's own invocation is refused; its turn must survive that.
	for o, err := range s.RunTurn(c.ctx, provider.TurnRequest{TurnID: "turn-1", Input: c.f.HostToolPrompt}) {
		if err != nil {
			c.errorf("the turn broke when a host tool was refused for capacity: %v", err)
			break
		}
		if o.Kind == provider.OutputRequest {
			break
		}
	}
	refused := false
	for _, a := range c.spy.attemptList() {
		refused = refused || a.code == provider.CodeHostToolCapacityExhausted
	}
	if !refused {
		c.errorf("the provider did not try %s while the binding was full", HostToolName)
	}
}

func checkHostRelease(c *checker) {
	k := c.binding()
	s := c.open(c.instance(), k.b, nil)
	ht := c.spy.lastTools()
	if c.f.HostToolPrompt != "" {
		c.pull(s.RunTurn(c.ctx, provider.TurnRequest{TurnID: "turn-1", Input: c.f.HostToolPrompt}), "the host-tool turn")
	}
	c.spy.markClosing()
	s.Close(c.ctx, provider.CloseRequested)
	s.Close(c.ctx, provider.CloseRequested)
	if n := k.echo.Releases(); n != 1 {
		c.errorf("the host's Release ran %d times over two closes; want 1", n)
	}
	_, err := ht.Invoke(c.ctx, provider.HostInvocation{ID: "kit-after", Tool: HostToolName, Arguments: json.RawMessage(`{"text":"x"}`)})
	if !provider.HasCode(err, provider.CodeHostBindingClosed) {
		c.errorf("after close the binding accepted an invocation: %v", err)
	}
	for _, a := range c.spy.attemptList() {
		if a.duringClosing {
			c.errorf("the provider invoked %s while its session was closing", a.tool)
		}
	}
}

// kitPerson is the host's Interactions in the interactions check.
type kitPerson struct {
	mu       sync.Mutex
	sessions []string
	asked    []provider.Interaction
}

func (p *kitPerson) Interact(ctx context.Context, sessionID string, in provider.Interaction) (provider.InteractionReply, error) {
	p.mu.Lock()
	p.sessions = append(p.sessions, sessionID)
	p.asked = append(p.asked, in)
	p.mu.Unlock()
	if in.Kind != provider.InteractionQuestion {
		return provider.InteractionReply{}, nil
	}
	if len(in.Options) > 0 {
		return provider.InteractionReply{Answer: in.Options[0]}, nil
	}
	return provider.InteractionReply{Answer: "yes"}, nil
}

func checkInteractions(c *checker) {
	c.require("InteractionPrompt", c.f.InteractionPrompt)
	p := &kitPerson{}
	inst := c.instance()
	req := provider.CreateRequest{SessionID: c.id("conformance-session"), WorkingDirectory: c.f.WorkingDirectory,
		Configuration: c.f.Configuration, Interactions: p, OnBinding: func(provider.Binding) {}}
	s, err := inst.Adapter().Create(c.ctx, req)
	if err != nil {
		c.fatalf("creating a session with interactions: %v", err)
	}
	c.adopt(s)
	ia := c.spy.lastInteractions()
	if ia == nil {
		c.fatalf("the provider declares interactions and received none")
	}
	c.completes(c.turn(s, "turn-1", c.f.InteractionPrompt), "the interaction turn")
	p.mu.Lock()
	asked, sessions := append([]provider.Interaction(nil), p.asked...), append([]string(nil), p.sessions...)
	p.mu.Unlock()
	if len(asked) == 0 {
		c.fatalf("the provider did not interact during the interaction turn")
	}
	for i, id := range sessions {
		if id != s.ID() {
			c.errorf("interaction %d names another session", i)
		}
	}
	for _, a := range c.spy.interactAttempts() {
		if a != "" {
			c.errorf("the provider's interaction was refused: %s", a)
		}
	}
	if err := s.Close(c.ctx, provider.CloseRequested); err != nil {
		c.fatalf("close: %v", err)
	}
	_, err = ia.Interact(c.ctx, s.ID(), provider.Interaction{ID: "kit-after-close", Kind: asked[0].Kind, Message: "still there?"})
	if !provider.HasCode(err, provider.CodeInvalidSessionInteraction) {
		c.errorf("after close the session's interactions accepted one: %v", err)
	}
}

func checkDispose(c *checker) {
	r, err := provider.OpenRegistry(c.ctx, []provider.Driver{c.driver}, []provider.Definition{c.f.Definition})
	if err != nil {
		c.fatalf("materialising: %v", err)
	}
	for i := range 2 {
		if err := r.Dispose(c.ctx); err != nil {
			c.errorf("dispose %d: %v", i+1, err)
			return
		}
	}
	if n := c.spy.disposes.Load(); n != 1 {
		c.errorf("the driver's Dispose ran %d times; want 1", n)
	}
	if _, err := r.Instance(c.f.Definition.ID); !provider.HasCode(err, provider.CodeRegistryDisposed) {
		c.errorf("a lookup after disposal: %v", err)
	}
}
