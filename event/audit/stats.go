package audit

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// Durations summarises a set of durations, in milliseconds. Percentiles
// are nearest-rank: P95 is the smallest value at least 95% of the values
// do not exceed.
type Durations struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P95   float64 `json:"p95Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

// Percentiles computes Durations over ms (which it sorts).
func Percentiles(ms []float64) Durations {
	if len(ms) == 0 {
		return Durations{}
	}
	slices.Sort(ms)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(ms)))) - 1
		return ms[max(0, min(i, len(ms)-1))]
	}
	return Durations{Count: len(ms), P50: rank(50), P95: rank(95), P99: rank(99), Max: ms[len(ms)-1]}
}

// TypeCount is how many events of one type the files hold.
type TypeCount struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// ToolDurations are one tool's call durations.
type ToolDurations struct {
	Tool string `json:"tool"`
	Durations
}

// Summary is what `agentry events stats` prints.
type Summary struct {
	Files  []File      `json:"files"`
	Events int         `json:"events"`
	ByType []TypeCount `json:"byType"`
	// Runs counts distinct run ids; Outcomes counts runs by the outcome of
	// their last turn: "running" for a turn started and not ended, "no
	// turns" for a run seen only through other events (a tool door's).
	Runs     int             `json:"runs"`
	Outcomes map[string]int  `json:"outcomes"`
	LLM      Durations       `json:"llm"`
	Tool     Durations       `json:"tool"`
	PerTool  []ToolDurations `json:"perTool"`
	// Tokens reported by the model calls.
	InputTokens  int       `json:"inputTokens"`
	OutputTokens int       `json:"outputTokens"`
	First        time.Time `json:"first"`
	Last         time.Time `json:"last"`
	BadLines     int       `json:"badLines"`
}

// Summarizer accumulates a Summary from a stream of events.
type Summarizer struct {
	events  int
	byType  map[event.Type]int
	runs    map[string]string
	llm     []float64
	tool    []float64
	perTool map[string][]float64
	in, out int
	first   time.Time
	last    time.Time
}

// NewSummarizer returns an empty summarizer.
func NewSummarizer() *Summarizer {
	return &Summarizer{byType: map[event.Type]int{}, runs: map[string]string{}, perTool: map[string][]float64{}}
}

// Add takes the next event.
func (s *Summarizer) Add(e event.Event) {
	s.events++
	s.byType[e.Type]++
	if t := e.Meta.Time; !t.IsZero() {
		if s.first.IsZero() || t.Before(s.first) {
			s.first = t
		}
		if t.After(s.last) {
			s.last = t
		}
	}
	if id := e.Meta.RunID; id != "" {
		if _, ok := s.runs[id]; !ok {
			s.runs[id] = "no turns"
		}
	}
	switch p := e.Payload.(type) {
	case *event.TurnEnd:
		if e.Meta.RunID != "" {
			s.runs[e.Meta.RunID] = p.Outcome
		}
	case *event.TurnStart:
		if e.Meta.RunID != "" {
			s.runs[e.Meta.RunID] = "running"
		}
	case *event.LLMEnd:
		s.llm = append(s.llm, p.DurationMs)
		s.in += p.InputTokens
		s.out += p.OutputTokens
	case *tool.CallEnd:
		s.tool = append(s.tool, p.DurationMs)
		s.perTool[p.Tool] = append(s.perTool[p.Tool], p.DurationMs)
	}
}

// Summary returns what the summarizer saw.
func (s *Summarizer) Summary() *Summary {
	out := &Summary{Events: s.events, Runs: len(s.runs), Outcomes: map[string]int{}, InputTokens: s.in, OutputTokens: s.out,
		First: s.first, Last: s.last, ByType: []TypeCount{}, PerTool: []ToolDurations{}}
	for t, n := range s.byType {
		out.ByType = append(out.ByType, TypeCount{Type: string(t), Count: n})
	}
	slices.SortFunc(out.ByType, func(a, b TypeCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Type, b.Type)
	})
	for _, o := range s.runs {
		out.Outcomes[o]++
	}
	out.LLM = Percentiles(slices.Clone(s.llm))
	out.Tool = Percentiles(slices.Clone(s.tool))
	for name, ms := range s.perTool {
		out.PerTool = append(out.PerTool, ToolDurations{Tool: name, Durations: Percentiles(slices.Clone(ms))})
	}
	slices.SortFunc(out.PerTool, func(a, b ToolDurations) int { return strings.Compare(a.Tool, b.Tool) })
	return out
}

// Summarize reads the files (with their .1 generations) and summarises
// them.
func Summarize(paths []string) *Summary {
	s := NewSummarizer()
	files := Read(Generations(paths), s.Add)
	out := s.Summary()
	out.Files = files
	for _, f := range files {
		out.BadLines += f.Bad
	}
	return out
}
