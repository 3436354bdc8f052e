package host

import (
	"sync"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// Bounds of the console's event record. It is a view for people, not a
// store: what it forgets is still in the events file.
const (
	recordConversations = 1024 // conversations remembered, least recently active dropped first
	recordRuns          = 16   // runs remembered per conversation, oldest dropped first
	recordRunEvents     = 1024 // events remembered per run; past it they are counted as dropped
	recordClosed        = 16   // closed tool sessions remembered per conversation
)

// record keeps, per conversation, what the console shows beside the API:
// the tool sessions live now (and the last few closed) and each recent
// run's timeline. It is fed by the EventSink, so it sees every event that
// carries a session id, and it keeps facts only: content events (streamed
// text, whole messages) are not kept.
type record struct {
	mu    sync.Mutex
	convs map[string]*convRecord
}

type convRecord struct {
	owner    tool.Identity // as the events name it; empty until one carries an identity
	lastSeen time.Time
	live     map[toolSessionID]*toolSessionView
	closed   []toolSessionView // oldest first
	runs     []*runRecord      // oldest first
}

type toolSessionID struct{ tool, keyHash string }

type runRecord struct {
	id      string
	events  []event.Event
	dropped int
}

func newRecord() *record { return &record{convs: make(map[string]*convRecord)} }

// observe records e when it belongs to a conversation. It never blocks on
// anything but its own map.
func (rc *record) observe(e event.Event) {
	if e.Meta.SessionID == "" {
		return
	}
	switch e.Type {
	case event.TypeLLMDelta, event.TypeLLMMessage:
		return // content: the transcript endpoint serves it from the store
	}
	// A call's arguments and result ride along for in-process observers;
	// the transcript keeps them (bounded), the record does not.
	switch p := e.Payload.(type) {
	case *tool.CallStart:
		if p.Args != nil {
			cp := *p
			cp.Args = nil
			e.Payload = &cp
		}
	case *tool.CallEnd:
		if p.Content != "" {
			cp := *p
			cp.Content = ""
			e.Payload = &cp
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	c := rc.convs[e.Meta.SessionID]
	if c == nil {
		if len(rc.convs) >= recordConversations {
			rc.dropColdest()
		}
		c = &convRecord{live: make(map[toolSessionID]*toolSessionView)}
		rc.convs[e.Meta.SessionID] = c
	}
	c.lastSeen = e.Meta.Time
	if c.owner == (tool.Identity{}) && e.Meta.Principal != "" {
		c.owner = tool.Identity{Tenant: e.Meta.Tenant, Principal: e.Meta.Principal}
	}
	c.toolSession(e)
	if e.Meta.RunID == "" {
		return
	}
	var run *runRecord
	for i := len(c.runs) - 1; i >= 0; i-- {
		if c.runs[i].id == e.Meta.RunID {
			run = c.runs[i]
			break
		}
	}
	if run == nil {
		if len(c.runs) >= recordRuns {
			c.runs = append(c.runs[:0], c.runs[1:]...)
		}
		run = &runRecord{id: e.Meta.RunID}
		c.runs = append(c.runs, run)
	}
	if len(run.events) >= recordRunEvents {
		run.dropped++
		return
	}
	run.events = append(run.events, e)
}

// dropColdest forgets the conversation least recently active. Called with
// rc.mu held, only when the record is full.
func (rc *record) dropColdest() {
	var coldest string
	var at time.Time
	for id, c := range rc.convs {
		if coldest == "" || c.lastSeen.Before(at) {
			coldest, at = id, c.lastSeen
		}
	}
	delete(rc.convs, coldest)
}

func (c *convRecord) toolSession(e event.Event) {
	switch p := e.Payload.(type) {
	case *tool.SessionOpened:
		id := toolSessionID{p.Tool, p.KeyHash}
		v := c.live[id]
		if v == nil {
			v = &toolSessionView{Tool: p.Tool, Scope: p.Scope, KeyHash: p.KeyHash, RunnerID: p.RunnerID, Label: p.Label, StartedAt: e.Meta.Time, Live: true}
			c.live[id] = v
		}
		v.Calls = p.Calls
	case *tool.SessionClosed:
		if e.Type != tool.TypeSessionClosed && e.Type != tool.TypeSessionCloseFailed {
			return
		}
		id := toolSessionID{p.Tool, p.KeyHash}
		v := toolSessionView{Tool: p.Tool, Scope: p.Scope, KeyHash: p.KeyHash, RunnerID: p.RunnerID, Label: p.Label}
		if l := c.live[id]; l != nil {
			v = *l
			delete(c.live, id)
		}
		closedAt := e.Meta.Time
		v.Live, v.Reason, v.HeldMs, v.ClosedAt = false, p.Reason, p.HeldMs, &closedAt
		if v.StartedAt.IsZero() {
			v.StartedAt = closedAt.Add(-time.Duration(p.HeldMs * float64(time.Millisecond)))
		}
		if e.Type == tool.TypeSessionCloseFailed {
			v.Failed, v.ErrorClass = true, p.ErrorClass
		}
		if len(c.closed) >= recordClosed {
			c.closed = append(c.closed[:0], c.closed[1:]...)
		}
		c.closed = append(c.closed, v)
	}
}

// toolSessionView is one tool session as the console shows it.
type toolSessionView struct {
	Tool      string     `json:"tool"`
	Scope     string     `json:"scope"`
	KeyHash   string     `json:"keyHash"`
	RunnerID  string     `json:"runnerId,omitempty"`
	Label     string     `json:"label,omitempty"`
	Calls     int        `json:"calls"`
	Live      bool       `json:"live"`
	StartedAt time.Time  `json:"startedAt"`
	HeldMs    float64    `json:"heldMs"`
	ClosedAt  *time.Time `json:"closedAt,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Failed    bool       `json:"failed,omitempty"`
	// ErrorClass says why a close failed (timeout, panic, cancelled,
	// error); the error text itself stays in the events file.
	ErrorClass string `json:"errorClass,omitempty"`
}

// conv returns a copy of what is recorded for conversation id of owner o:
// live tool sessions (held up to now), recently closed ones, and the runs'
// events. A conversation whose events name another owner has nothing.
func (rc *record) conv(id string, o tool.Identity, now time.Time) (live, closed []toolSessionView, runs []runRecord) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	c := rc.convs[id]
	if c == nil || (c.owner != (tool.Identity{}) && c.owner != o) {
		return nil, nil, nil
	}
	for _, v := range c.live {
		cp := *v
		if held := now.Sub(cp.StartedAt); held > 0 {
			cp.HeldMs = event.Ms(held)
		}
		live = append(live, cp)
	}
	closed = append(closed, c.closed...)
	for _, r := range c.runs {
		runs = append(runs, runRecord{id: r.id, events: append([]event.Event(nil), r.events...), dropped: r.dropped})
	}
	return live, closed, runs
}

// span is one bar of a run's waterfall: a turn of the loop, a model call,
// a tool call or a code execution.
type span struct {
	// Kind is "turn", "model", "tool" or "code".
	Kind string `json:"kind"`
	Name string `json:"name"`
	// StartMs is the offset from the run's first event.
	StartMs    float64 `json:"startMs"`
	DurationMs float64 `json:"durationMs"`
	// Open is true when the span has not ended (yet, or ever: a turn cut
	// short); its duration then runs to now.
	Open   bool   `json:"open,omitempty"`
	Status string `json:"status,omitempty"`
}

// mark is an instant of a run: a pause, a decision, a tool session opened
// or closed, a fatal error.
type mark struct {
	Kind string  `json:"kind"`
	Name string  `json:"name"`
	AtMs float64 `json:"atMs"`
}

// timeline is one run's waterfall.
type timeline struct {
	RunID      string    `json:"runId"`
	StartedAt  time.Time `json:"startedAt"`
	DurationMs float64   `json:"durationMs"`
	// Outcome is the last turn's outcome (answer, error, paused,
	// cancelled), empty while it runs.
	Outcome string `json:"outcome,omitempty"`
	Spans   []span `json:"spans"`
	Marks   []mark `json:"marks"`
	// Dropped counts events past the record's bound for one run.
	Dropped int `json:"dropped,omitempty"`
}

// buildTimeline turns a run's events into its waterfall. Ends are matched
// to starts by iteration (model calls) and tool-call id (tool calls); an
// end with no start is drawn from its own duration; a start with no end is
// open until now. Durations are never negative.
func buildTimeline(r runRecord, now time.Time) timeline {
	tl := timeline{RunID: r.id, Spans: []span{}, Marks: []mark{}, Dropped: r.dropped}
	if len(r.events) == 0 {
		return tl
	}
	t0 := r.events[0].Meta.Time
	for _, e := range r.events {
		if e.Meta.Time.Before(t0) {
			t0 = e.Meta.Time
		}
	}
	tl.StartedAt = t0
	b := &timelineBuilder{tl: tl, t0: t0, openTurn: -1, openModel: map[int]int{}, openTool: map[string]int{}}
	for _, e := range r.events {
		b.add(e)
	}
	tl = b.tl
	end := b.at(now)
	for i := range tl.Spans {
		s := &tl.Spans[i]
		if s.Open {
			s.DurationMs = max(0, end-s.StartMs)
		}
		tl.DurationMs = max(tl.DurationMs, s.StartMs+s.DurationMs)
	}
	for _, m := range tl.Marks {
		tl.DurationMs = max(tl.DurationMs, m.AtMs)
	}
	return tl
}

// timelineBuilder holds a timeline being drawn and the spans still open:
// the turn, model calls by iteration, tool calls by tool-call id.
type timelineBuilder struct {
	tl        timeline
	t0        time.Time
	openTurn  int
	openModel map[int]int
	openTool  map[string]int
}

// at is t's offset from the run's first event, never negative.
func (b *timelineBuilder) at(t time.Time) float64 { return max(0, event.Ms(t.Sub(b.t0))) }

// closeSpan ends span i at t, preferring the duration the payload
// measured.
func (b *timelineBuilder) closeSpan(i int, t time.Time, measured float64, status string) {
	s := &b.tl.Spans[i]
	s.Open, s.Status = false, status
	s.DurationMs = max(0, b.at(t)-s.StartMs)
	if measured > 0 {
		s.DurationMs = measured
	}
}

// ended draws a span known only from its end.
func (b *timelineBuilder) ended(kind, name string, t time.Time, measured float64, status string) {
	start := max(0, b.at(t)-max(0, measured))
	b.tl.Spans = append(b.tl.Spans, span{Kind: kind, Name: name, StartMs: start, DurationMs: max(0, b.at(t)-start), Status: status})
}

// add draws one event: a span opened or closed, or a mark.
func (b *timelineBuilder) add(e event.Event) {
	t := e.Meta.Time
	switch p := e.Payload.(type) {
	case *event.TurnStart:
		name := "turn"
		if p.Resumed {
			name = "resumed turn"
		}
		b.tl.Spans = append(b.tl.Spans, span{Kind: "turn", Name: name, StartMs: b.at(t), Open: true})
		b.openTurn = len(b.tl.Spans) - 1
	case *event.TurnEnd:
		b.tl.Outcome = p.Outcome
		if b.openTurn >= 0 {
			b.closeSpan(b.openTurn, t, p.DurationMs, p.Outcome)
			b.openTurn = -1
		} else {
			b.ended("turn", "turn", t, p.DurationMs, p.Outcome)
		}
	case *event.LLMStart:
		b.tl.Spans = append(b.tl.Spans, span{Kind: "model", Name: modelName(p.Model), StartMs: b.at(t), Open: true})
		b.openModel[p.Iteration] = len(b.tl.Spans) - 1
	case *event.LLMEnd:
		status := p.StopReason
		if p.Error != "" {
			status = "error"
		}
		if i, ok := b.openModel[p.Iteration]; ok {
			delete(b.openModel, p.Iteration)
			b.closeSpan(i, t, p.DurationMs, status)
			if p.Model != "" {
				b.tl.Spans[i].Name = p.Model
			}
		} else {
			b.ended("model", modelName(p.Model), t, p.DurationMs, status)
		}
	case *tool.CallStart:
		b.tl.Spans = append(b.tl.Spans, span{Kind: "tool", Name: p.Tool, StartMs: b.at(t), Open: true})
		b.openTool[p.ToolCallID] = len(b.tl.Spans) - 1
	case *tool.CallEnd:
		status := "ok"
		if p.IsError {
			status = p.ErrorClass
			if status == "" {
				status = "error"
			}
		}
		if i, ok := b.openTool[p.ToolCallID]; ok {
			delete(b.openTool, p.ToolCallID)
			b.closeSpan(i, t, p.DurationMs, status)
		} else {
			b.ended("tool", p.Tool, t, p.DurationMs, status)
		}
	case *code.RunReport:
		status := "ok"
		if !p.OK {
			status = "failed"
		}
		name := p.Language
		if p.RunnerID != "" {
			name = p.RunnerID + " " + p.Language
		}
		b.ended("code", name, t, p.DurationMs, status)
	case *event.PauseRequest:
		b.tl.Marks = append(b.tl.Marks, mark{Kind: "pause", Name: p.Tool, AtMs: b.at(t)})
	case *event.PauseResume:
		k := "declined"
		if p.Approved {
			k = "approved"
		}
		b.tl.Marks = append(b.tl.Marks, mark{Kind: k, Name: p.Tool, AtMs: b.at(t)})
	case *tool.SessionOpened:
		k := "session_started"
		if e.Type == tool.TypeSessionReused {
			k = "session_reused"
		}
		b.tl.Marks = append(b.tl.Marks, mark{Kind: k, Name: p.Tool + " " + p.KeyHash, AtMs: b.at(t)})
	case *tool.SessionClosed:
		k := "session_closed"
		if e.Type == tool.TypeSessionCloseFailed {
			k = "session_close_failed"
		}
		b.tl.Marks = append(b.tl.Marks, mark{Kind: k, Name: p.Tool + " " + p.KeyHash + " (" + p.Reason + ")", AtMs: b.at(t)})
	case *event.Fatal:
		b.tl.Marks = append(b.tl.Marks, mark{Kind: "fatal", Name: p.Where, AtMs: b.at(t)})
	}
}

func modelName(m string) string {
	if m == "" {
		return "model"
	}
	return m
}
