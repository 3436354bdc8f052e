// Package otel turns agentry's events into OpenTelemetry: spans for runs,
// iterations, model calls and tool calls, and metrics for tool sessions and
// model and tool call durations. It is an event.Sink over the official
// go.opentelemetry.io/otel SDK.
//
// Spans, per run (events relate by Meta.RunID):
//
//	invoke_agent [agent id]          one per turn (a Run, or a Resume)
//	└── agentry.iteration N          from the iteration's model call to the next
//	    ├── chat [model]             a model call
//	    └── execute_tool [tool]      a tool call
//
// Attribute names follow the GenAI semantic conventions where one exists
// (gen_ai.operation.name, gen_ai.request.model, gen_ai.usage.input_tokens,
// gen_ai.tool.name, gen_ai.tool.call.id, gen_ai.conversation.id, ...) and
// use the agentry. prefix otherwise. A resumed turn is a child of the
// paused turn, so one run is one trace. Span times are the events' times.
//
// Metrics: agentry.tool_sessions.{live, opened, reused, closed,
// close_failures} by tool and scope (closes also by reason),
// agentry.tool_sessions.teardown.duration and .held.duration, and the
// GenAI client histograms gen_ai.client.operation.duration and
// gen_ai.client.token.usage. No attribute carries a key, a key hash or an
// id, so cardinality stays bounded by the tools in use.
//
// [New] takes the providers the application already has; [NewFromEnv]
// builds OTLP exporters configured by the standard OTEL_EXPORTER_OTLP_*
// variables and owns them.
package otel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tnoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/agentry-dev/agentry/event/otel"

// Attribute keys agentry adds where the GenAI conventions have none.
const (
	KeyRunID        = attribute.Key("agentry.run.id")
	KeyIteration    = attribute.Key("agentry.iteration")
	KeyOutcome      = attribute.Key("agentry.turn.outcome")
	KeyIterations   = attribute.Key("agentry.turn.iterations")
	KeyResumed      = attribute.Key("agentry.turn.resumed")
	KeyToolCalls    = attribute.Key("agentry.llm.tool_calls")
	KeyTool         = attribute.Key("agentry.tool")
	KeyScope        = attribute.Key("agentry.scope")
	KeyReason       = attribute.Key("agentry.reason")
	KeyKeyHash      = attribute.Key("agentry.key_hash")
	KeyCloseOutcome = attribute.Key("agentry.outcome")
	KeyErrorType    = attribute.Key("error.type")
)

// Options configure a Sink.
type Options struct {
	// TracerProvider receives the spans; nil means no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the metrics; nil means no metrics.
	MeterProvider metric.MeterProvider
	// MaxRuns bounds the runs tracked at once (default 4096). Past it the
	// least recently active run's open spans are ended with an error status
	// saying so. A paused run counts until it resumes or is evicted.
	MaxRuns int
	// OnError hears about failures to create instruments or flush
	// (default: slog).
	OnError func(error)
}

// Sink is the OpenTelemetry bridge. It is safe for concurrent use.
type Sink struct {
	tracer  trace.Tracer
	onError func(error)
	maxRuns int
	owned   []shutdowner // providers NewFromEnv built
	flushes []flusher

	opened, reused, closes, failed metric.Int64Counter
	liveUD                         metric.Int64UpDownCounter
	teardown, held, opDuration     metric.Float64Histogram
	tokensInt                      metric.Int64Histogram

	mu     sync.Mutex
	runs   map[string]*run
	tick   uint64 // activity clock for eviction
	closed bool
}

type shutdowner interface {
	Shutdown(context.Context) error
}

type flusher interface {
	ForceFlush(context.Context) error
}

type run struct {
	id         string
	turn       trace.Span
	turnCtx    context.Context
	iteration  int
	iter       trace.Span
	iterCtx    context.Context
	iterByNum  map[int]context.Context
	llm        trace.Span
	tools      map[string]trace.Span
	paused     trace.SpanContext // of the last paused turn, for the resume
	lastActive uint64
}

// New returns a sink over the given providers. Flush and Close flush the
// providers when they can (the SDK's can); Close does not shut them down:
// they belong to the caller.
func New(opt Options) (*Sink, error) {
	s := &Sink{onError: opt.OnError, maxRuns: opt.MaxRuns, runs: map[string]*run{}}
	if s.onError == nil {
		s.onError = func(err error) { slog.Error("agentry otel sink", "err", err) }
	}
	if s.maxRuns <= 0 {
		s.maxRuns = 4096
	}
	tp := opt.TracerProvider
	if tp == nil {
		tp = tnoop.NewTracerProvider()
	}
	mp := opt.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	for _, p := range []any{opt.TracerProvider, opt.MeterProvider} {
		if f, ok := p.(flusher); ok {
			s.flushes = append(s.flushes, f)
		}
	}
	s.tracer = tp.Tracer(ScopeName)
	if err := s.instruments(mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("otel: creating instruments: %w", err)
	}
	return s, nil
}

func (s *Sink) instruments(m metric.Meter) error {
	var errs []error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc, unit string, bounds ...float64) metric.Float64Histogram {
		opts := []metric.Float64HistogramOption{metric.WithDescription(desc), metric.WithUnit(unit)}
		if len(bounds) > 0 {
			opts = append(opts, metric.WithExplicitBucketBoundaries(bounds...))
		}
		h, err := m.Float64Histogram(name, opts...)
		errs = append(errs, err)
		return h
	}
	var err error
	s.liveUD, err = m.Int64UpDownCounter("agentry.tool_sessions.live",
		metric.WithDescription("Tool sessions open now (opened minus closed, as seen by this sink)."), metric.WithUnit("{session}"))
	errs = append(errs, err)
	s.opened = counter("agentry.tool_sessions.opened", "Tool sessions opened.", "{session}")
	s.reused = counter("agentry.tool_sessions.reused", "Tool calls that joined a session already open.", "{call}")
	s.closes = counter("agentry.tool_sessions.closed", "Tool sessions closed, by reason.", "{session}")
	s.failed = counter("agentry.tool_sessions.close_failures", "Tool session closes that failed or timed out.", "{session}")
	secs := []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	s.teardown = hist("agentry.tool_sessions.teardown.duration", "How long a tool session's cleanup took.", "s", secs...)
	s.held = hist("agentry.tool_sessions.held.duration", "How long a tool session was held, open to close.", "s",
		1, 5, 15, 60, 300, 900, 1800, 3600, 4*3600, 24*3600)
	s.opDuration = hist("gen_ai.client.operation.duration", "GenAI operation duration.", "s",
		0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
	s.tokensInt, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithDescription("Number of input and output tokens used."),
		metric.WithUnit("{token}"), metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	errs = append(errs, err)
	return errors.Join(errs...)
}

func at(e event.Event) time.Time {
	if e.Meta.Time.IsZero() {
		return time.Now()
	}
	return e.Meta.Time
}

// Export turns one event into span and metric updates. It never blocks on
// I/O: the SDK's batch processor and periodic reader do the exporting.
func (s *Sink) Export(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.metrics(context.Background(), e)
	if e.Meta.RunID == "" {
		return
	}
	switch p := e.Payload.(type) {
	case *event.TurnStart:
		s.turnStart(e, p)
	case *event.TurnEnd:
		s.turnEnd(e, p)
	case *event.LLMStart:
		s.llmStart(e, p)
	case *event.LLMEnd:
		s.llmEnd(e, p)
	case *tool.CallStart:
		s.toolStart(e, p)
	case *tool.CallEnd:
		s.toolEnd(e, p)
	case *tool.SessionOpened, *event.PauseRequest, *event.PauseResume, *event.Fatal, *tool.Panicked, *code.RunReport:
		s.annotate(e)
	}
}

// get returns the run's state, creating it when create is set.
func (s *Sink) get(id string, create bool) *run {
	r := s.runs[id]
	if r == nil && create {
		if len(s.runs) >= s.maxRuns {
			s.evictOne()
		}
		r = &run{id: id, tools: map[string]trace.Span{}, iterByNum: map[int]context.Context{}}
		s.runs[id] = r
	}
	if r != nil {
		s.tick++
		r.lastActive = s.tick
	}
	return r
}

func (s *Sink) evictOne() {
	var oldest *run
	for _, r := range s.runs {
		if oldest == nil || r.lastActive < oldest.lastActive {
			oldest = r
		}
	}
	if oldest != nil {
		s.endAll(oldest, time.Now(), "evicted: more than MaxRuns runs in flight")
		delete(s.runs, oldest.id)
	}
}

// endAll ends every open span of a run, innermost first.
func (s *Sink) endAll(r *run, t time.Time, why string) {
	for id, sp := range r.tools {
		if why != "" {
			sp.SetStatus(codes.Error, why)
		}
		sp.End(trace.WithTimestamp(t))
		delete(r.tools, id)
	}
	if r.llm != nil {
		if why != "" {
			r.llm.SetStatus(codes.Error, why)
		}
		r.llm.End(trace.WithTimestamp(t))
		r.llm = nil
	}
	if r.iter != nil && why != "" && r.turn != nil {
		// Eviction or Close: the iteration did not end on its own either.
		r.iter.SetStatus(codes.Error, why)
	}
	s.endIteration(r, t)
	if r.turn != nil {
		if why != "" {
			r.turn.SetStatus(codes.Error, why)
		}
		r.turn.End(trace.WithTimestamp(t))
		r.turn, r.turnCtx = nil, nil
	}
}

func (s *Sink) endIteration(r *run, t time.Time) {
	if r.iter != nil {
		r.iter.End(trace.WithTimestamp(t))
		r.iter, r.iterCtx = nil, nil
	}
	r.iterByNum = map[int]context.Context{}
}

func (s *Sink) turnStart(e event.Event, p *event.TurnStart) {
	r := s.get(e.Meta.RunID, true)
	t := at(e)
	if r.turn != nil { // a turn_start without the previous turn_end
		s.endAll(r, t, "superseded: a new turn started before this one ended")
	}
	parent := context.Background()
	opts := []trace.SpanStartOption{trace.WithTimestamp(t), trace.WithSpanKind(trace.SpanKindInternal)}
	if r.paused.IsValid() {
		parent = trace.ContextWithSpanContext(parent, r.paused)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: r.paused}))
	}
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameInvokeAgent, KeyRunID.String(e.Meta.RunID)}
	if e.Meta.AgentID != "" {
		attrs = append(attrs, semconv.GenAIAgentID(e.Meta.AgentID), semconv.GenAIAgentName(e.Meta.AgentID))
	}
	if e.Meta.SessionID != "" {
		attrs = append(attrs, semconv.GenAIConversationID(e.Meta.SessionID))
	}
	if p.Resumed || r.paused.IsValid() {
		attrs = append(attrs, KeyResumed.Bool(true))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	name := "invoke_agent"
	if e.Meta.AgentID != "" {
		name += " " + e.Meta.AgentID
	}
	r.turnCtx, r.turn = s.tracer.Start(parent, name, opts...)
	r.iteration = 0
}

func (s *Sink) turnEnd(e event.Event, p *event.TurnEnd) {
	r := s.get(e.Meta.RunID, false)
	if r == nil || r.turn == nil {
		return
	}
	t := at(e)
	turn := r.turn
	turn.SetAttributes(KeyOutcome.String(p.Outcome), KeyIterations.Int(p.Iterations))
	if p.Outcome == event.OutcomeError {
		turn.SetStatus(codes.Error, truncate(p.Error, 256))
	}
	r.turn = nil // endAll must not end it with the "unfinished" status
	s.endAll(r, t, "unfinished when the turn ended")
	turn.End(trace.WithTimestamp(t))
	r.turnCtx = nil
	if p.Outcome == event.OutcomePaused {
		r.paused = turn.SpanContext()
		return
	}
	delete(s.runs, r.id)
}

// iterationCtx returns the context of iteration n, starting it (and ending
// the previous one) when it is new.
func (s *Sink) iterationCtx(r *run, n int, t time.Time) context.Context {
	if r.turn == nil {
		return nil
	}
	if n <= 0 {
		n = max(r.iteration, 1)
	}
	if ctx, ok := r.iterByNum[n]; ok {
		return ctx
	}
	if n < r.iteration {
		return r.turnCtx // a late event for an iteration already ended
	}
	if r.iter != nil {
		r.iter.End(trace.WithTimestamp(t))
	}
	r.iteration = n
	r.iterCtx, r.iter = s.tracer.Start(r.turnCtx, "agentry.iteration "+strconv.Itoa(n),
		trace.WithTimestamp(t), trace.WithAttributes(KeyIteration.Int(n), KeyRunID.String(r.id)))
	r.iterByNum = map[int]context.Context{n: r.iterCtx}
	return r.iterCtx
}

func (s *Sink) llmStart(e event.Event, p *event.LLMStart) {
	r := s.get(e.Meta.RunID, false)
	if r == nil {
		return
	}
	t := at(e)
	parent := s.iterationCtx(r, p.Iteration, t)
	if parent == nil {
		return
	}
	if r.llm != nil {
		r.llm.SetStatus(codes.Error, "superseded: a new model call started before this one ended")
		r.llm.End(trace.WithTimestamp(t))
	}
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat, KeyIteration.Int(p.Iteration)}
	if p.Model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(p.Model))
	}
	_, r.llm = s.tracer.Start(parent, spanName("chat", p.Model), trace.WithTimestamp(t),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

func (s *Sink) llmEnd(e event.Event, p *event.LLMEnd) {
	r := s.get(e.Meta.RunID, false)
	if r == nil {
		return
	}
	t := at(e)
	sp := r.llm
	r.llm = nil
	if sp == nil {
		// The start was not seen: reconstruct the span from the duration.
		parent := s.iterationCtx(r, p.Iteration, t)
		if parent == nil {
			return
		}
		attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat, KeyIteration.Int(p.Iteration)}
		if p.Model != "" {
			attrs = append(attrs, semconv.GenAIRequestModel(p.Model))
		}
		_, sp = s.tracer.Start(parent, spanName("chat", p.Model), trace.WithTimestamp(t.Add(-ms(p.DurationMs))),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	}
	sp.SetAttributes(semconv.GenAIUsageInputTokens(p.InputTokens), semconv.GenAIUsageOutputTokens(p.OutputTokens),
		KeyToolCalls.Int(p.ToolCalls))
	if p.Model != "" {
		sp.SetAttributes(semconv.GenAIResponseModel(p.Model))
	}
	if p.StopReason != "" {
		sp.SetAttributes(semconv.GenAIResponseFinishReasons(p.StopReason))
	}
	if p.Error != "" {
		sp.SetStatus(codes.Error, truncate(p.Error, 256))
		sp.SetAttributes(KeyErrorType.String("model_error"))
	}
	sp.End(trace.WithTimestamp(t))
}

func (s *Sink) toolStart(e event.Event, p *tool.CallStart) {
	r := s.get(e.Meta.RunID, false)
	if r == nil {
		return
	}
	t := at(e)
	parent := s.iterationCtx(r, p.Iteration, t)
	if parent == nil {
		return
	}
	if old, ok := r.tools[p.ToolCallID]; ok {
		old.SetStatus(codes.Error, "superseded: the same tool call id started again")
		old.End(trace.WithTimestamp(t))
	}
	_, sp := s.tracer.Start(parent, spanName("execute_tool", p.Tool), trace.WithTimestamp(t),
		trace.WithAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(p.Tool),
			semconv.GenAIToolCallID(p.ToolCallID), KeyIteration.Int(p.Iteration)))
	r.tools[p.ToolCallID] = sp
}

func (s *Sink) toolEnd(e event.Event, p *tool.CallEnd) {
	r := s.get(e.Meta.RunID, false)
	if r == nil {
		return
	}
	t := at(e)
	sp, ok := r.tools[p.ToolCallID]
	if ok {
		delete(r.tools, p.ToolCallID)
	} else {
		parent := s.iterationCtx(r, 0, t)
		if parent == nil {
			return
		}
		_, sp = s.tracer.Start(parent, spanName("execute_tool", p.Tool), trace.WithTimestamp(t.Add(-ms(p.DurationMs))),
			trace.WithAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(p.Tool), semconv.GenAIToolCallID(p.ToolCallID)))
	}
	if p.IsError {
		class := p.ErrorClass
		if class == "" {
			class = tool.ClassToolError
		}
		sp.SetStatus(codes.Error, class)
		sp.SetAttributes(KeyErrorType.String(class))
	}
	sp.End(trace.WithTimestamp(t))
}

// annotate records lifecycle facts as span events on the run's turn.
func (s *Sink) annotate(e event.Event) {
	r := s.get(e.Meta.RunID, false)
	if r == nil || r.turn == nil {
		return
	}
	var attrs []attribute.KeyValue
	switch p := e.Payload.(type) {
	case *tool.SessionOpened:
		attrs = []attribute.KeyValue{KeyTool.String(p.Tool), KeyScope.String(p.Scope), KeyKeyHash.String(p.KeyHash)}
	case *event.PauseRequest:
		attrs = []attribute.KeyValue{semconv.GenAIToolName(p.Tool), semconv.GenAIToolCallID(p.ToolCallID)}
	case *event.PauseResume:
		attrs = []attribute.KeyValue{semconv.GenAIToolName(p.Tool), semconv.GenAIToolCallID(p.ToolCallID), attribute.Bool("agentry.approved", p.Approved)}
	case *tool.Panicked:
		attrs = []attribute.KeyValue{semconv.GenAIToolName(p.Tool), semconv.GenAIToolCallID(p.ToolCallID)}
	case *event.Fatal:
		attrs = []attribute.KeyValue{attribute.String("agentry.where", p.Where), KeyErrorType.String(p.ErrorClass)}
	case *code.RunReport:
		attrs = []attribute.KeyValue{KeyTool.String(p.Tool), attribute.Bool("agentry.ok", p.OK), attribute.Int("agentry.output_chars", p.OutputChars)}
	}
	r.turn.AddEvent(string(e.Type), trace.WithTimestamp(at(e)), trace.WithAttributes(attrs...))
}

// metrics records the tool-session and GenAI metrics of an event.
func (s *Sink) metrics(ctx context.Context, e event.Event) {
	switch p := e.Payload.(type) {
	case *tool.SessionOpened:
		set := metric.WithAttributes(KeyTool.String(p.Tool), KeyScope.String(p.Scope))
		if e.Type == tool.TypeSessionReused {
			s.reused.Add(ctx, 1, set)
			return
		}
		s.opened.Add(ctx, 1, set)
		s.liveUD.Add(ctx, 1, set)
	case *tool.SessionClosed:
		s.liveUD.Add(ctx, -1, metric.WithAttributes(KeyTool.String(p.Tool), KeyScope.String(p.Scope)))
		outcome := "closed"
		if e.Type == tool.TypeSessionCloseFailed {
			outcome = "failed"
			class := p.ErrorClass
			if class == "" {
				class = "error"
			}
			s.failed.Add(ctx, 1, metric.WithAttributes(KeyTool.String(p.Tool), KeyScope.String(p.Scope),
				KeyReason.String(p.Reason), KeyErrorType.String(class)))
		} else {
			s.closes.Add(ctx, 1, metric.WithAttributes(KeyTool.String(p.Tool), KeyScope.String(p.Scope), KeyReason.String(p.Reason)))
		}
		attrs := metric.WithAttributes(KeyTool.String(p.Tool), KeyScope.String(p.Scope), KeyReason.String(p.Reason), KeyCloseOutcome.String(outcome))
		s.teardown.Record(ctx, p.TookMs/1000, attrs)
		s.held.Record(ctx, p.HeldMs/1000, attrs)
	case *event.LLMEnd:
		attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat}
		if p.Model != "" {
			attrs = append(attrs, semconv.GenAIRequestModel(p.Model))
		}
		if p.Error != "" {
			s.opDuration.Record(ctx, p.DurationMs/1000, metric.WithAttributes(append(attrs, KeyErrorType.String("model_error"))...))
		} else {
			s.opDuration.Record(ctx, p.DurationMs/1000, metric.WithAttributes(attrs...))
		}
		s.tokensInt.Record(ctx, int64(p.InputTokens), metric.WithAttributes(append(attrs, semconv.GenAITokenTypeInput)...))
		s.tokensInt.Record(ctx, int64(p.OutputTokens), metric.WithAttributes(append(attrs, semconv.GenAITokenTypeOutput)...))
	case *tool.CallEnd:
		attrs := []attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(p.Tool)}
		if p.IsError {
			class := p.ErrorClass
			if class == "" {
				class = tool.ClassToolError
			}
			attrs = append(attrs, KeyErrorType.String(class))
		}
		s.opDuration.Record(ctx, p.DurationMs/1000, metric.WithAttributes(attrs...))
	}
}

// Flush asks the providers to export what they hold, bounded by ctx.
func (s *Sink) Flush(ctx context.Context) error {
	var errs []error
	for _, f := range s.flushes {
		if err := f.ForceFlush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otel: flush: %w", err)
	}
	return nil
}

// Close ends every span still open (with an error status saying the sink
// closed), flushes, and shuts down the providers NewFromEnv built. Later
// exports are ignored. Safe to call twice.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	now := time.Now()
	for id, r := range s.runs {
		s.endAll(r, now, "unfinished when the sink closed")
		delete(s.runs, id)
	}
	s.mu.Unlock()
	err := s.Flush(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range s.owned {
		if err := p.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("otel: shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

func spanName(op, what string) string {
	if what == "" {
		return op
	}
	return op + " " + what
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
