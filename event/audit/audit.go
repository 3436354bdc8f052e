// Package audit reads agentry event files and answers an operator's
// questions about them: did every tool session close, did any close fail,
// did a run end while its sandbox stayed open ([Audit]); what happened and
// how long did it take ([Summarize]); and what is happening now, one
// readable line per event ([Format]). The `agentry events` commands are
// thin wrappers around it.
//
// It reads what event/ndjson writes, including the one older generation
// (PATH.1), and never fails on a bad line: bad lines are counted and
// reported by number, never quoted.
package audit

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/tool"
)

// File is what reading one file found.
type File struct {
	Path string `json:"path"`
	ndjson.ScanStats
	// Missing is true for a named file that does not exist. (An absent
	// PATH.1 is not reported: there may never have been a rotation.)
	Missing bool   `json:"missing,omitempty"`
	Err     string `json:"error,omitempty"`
}

// Generations lists the files to read for the given paths, oldest first:
// for each path its PATH.1, when it exists and is not named too, then the
// path itself. Duplicates are read once.
func Generations(paths []string) []string {
	named := map[string]bool{}
	for _, p := range paths {
		named[p] = true
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		if !strings.HasSuffix(p, ".1") && !named[p+".1"] {
			if _, err := os.Stat(p + ".1"); err == nil {
				add(p + ".1")
			}
		}
		add(p)
	}
	return out
}

// Read scans the files in order and hands every event to fn.
func Read(paths []string, fn func(event.Event)) []File {
	var files []File
	for _, p := range paths {
		st, err := ndjson.ScanFile(p, fn)
		f := File{Path: p, ScanStats: st}
		if os.IsNotExist(err) {
			f.Missing = true
		} else if err != nil {
			f.Err = err.Error()
		}
		files = append(files, f)
	}
	return files
}

// Session is one tool session the files saw opened.
type Session struct {
	Tool    string `json:"tool"`
	Scope   string `json:"scope"`
	KeyHash string `json:"keyHash"`
	// RunID and SessionID are of the run that opened it.
	RunID     string    `json:"runId,omitempty"`
	SessionID string    `json:"sessionId,omitempty"`
	OpenedAt  time.Time `json:"openedAt"`
	// SeenFrom is "started", or "reused" when the files begin after the
	// session was opened and only a reuse shows it.
	SeenFrom string `json:"seenFrom"`
	// RunState is what became of the opening run by the end of the files:
	// "answer", "error", "cancelled" (terminals), "paused", or "" when the
	// files show no end of it.
	RunState string `json:"runState,omitempty"`
}

// FailedClose is a session_close_failed event.
type FailedClose struct {
	Tool       string    `json:"tool"`
	Scope      string    `json:"scope"`
	KeyHash    string    `json:"keyHash"`
	Reason     string    `json:"reason"`
	RunID      string    `json:"runId,omitempty"`
	ErrorClass string    `json:"errorClass,omitempty"`
	Error      string    `json:"error,omitempty"`
	At         time.Time `json:"at"`
}

// EndedRun is a run whose last turn ended in a terminal (answer, error,
// cancelled) while run-scoped sessions it opened stayed open.
type EndedRun struct {
	RunID   string    `json:"runId"`
	Outcome string    `json:"outcome"`
	EndedAt time.Time `json:"endedAt"`
	// Sessions are the run-scoped sessions open after the run ended. A
	// session with ClosedBy set was closed later by something other than
	// the run's end (idle expiry, eviction, shutdown).
	Sessions []LateSession `json:"sessions"`
}

// LateSession is a run-scoped session that outlived its run.
type LateSession struct {
	Tool     string `json:"tool"`
	KeyHash  string `json:"keyHash"`
	ClosedBy string `json:"closedBy,omitempty"`
}

// ToolScope counts the sessions of one tool in one scope.
type ToolScope struct {
	Tool   string         `json:"tool"`
	Scope  string         `json:"scope"`
	Opened int            `json:"opened"`
	Reused int            `json:"reused"`
	Closed map[string]int `json:"closedByReason"`
	Failed map[string]int `json:"failedByReason"`
	Open   int            `json:"stillOpen"`
}

// Report is the audit of a set of files.
type Report struct {
	Files  []File      `json:"files"`
	Events int         `json:"events"`
	Tools  []ToolScope `json:"tools"`
	// Open lists the sessions still open at the end of the files.
	Open []Session `json:"open"`
	// FailedCloses lists every close that failed.
	FailedCloses []FailedClose `json:"failedCloses"`
	// EndedRuns lists runs that ended while their run-scoped sessions
	// stayed open.
	EndedRuns []EndedRun `json:"endedRunsWithOpenSessions"`
	// UnmatchedCloses counts closes of sessions opened before the files
	// begin.
	UnmatchedCloses int `json:"unmatchedCloses"`
	// BadLines totals the files' bad lines.
	BadLines int `json:"badLines"`
}

// Problems reports whether the audit found a leak or a failed close —
// what should fail a deploy gate.
func (r *Report) Problems() bool {
	return len(r.Open) > 0 || len(r.FailedCloses) > 0 || len(r.EndedRuns) > 0
}

// Auditor follows the session lifecycle through a stream of events. Feed
// it with Add, in file order, then call Report.
type Auditor struct {
	events   int
	tools    map[[2]string]*ToolScope
	open     map[sessionKey][]*Session
	order    []*Session // every open, to report in order
	closed   map[*Session]bool
	failed   []FailedClose
	runs     map[string]*runState
	late     map[string][]LateSession // run id → run-scoped sessions closed after the run ended
	unmatch  int
	lateRuns []string
}

type sessionKey struct{ tool, scope, keyHash string }

type runState struct {
	outcome string
	at      time.Time
}

// NewAuditor returns an empty auditor.
func NewAuditor() *Auditor {
	return &Auditor{
		tools:  map[[2]string]*ToolScope{},
		open:   map[sessionKey][]*Session{},
		closed: map[*Session]bool{},
		runs:   map[string]*runState{},
		late:   map[string][]LateSession{},
	}
}

func (a *Auditor) tool(tool, scope string) *ToolScope {
	k := [2]string{tool, scope}
	ts := a.tools[k]
	if ts == nil {
		ts = &ToolScope{Tool: tool, Scope: scope, Closed: map[string]int{}, Failed: map[string]int{}}
		a.tools[k] = ts
	}
	return ts
}

// Add takes the next event.
func (a *Auditor) Add(e event.Event) {
	a.events++
	switch e.Type {
	case event.TypeTurnEnd:
		if p, ok := e.Payload.(*event.TurnEnd); ok && e.Meta.RunID != "" {
			a.runs[e.Meta.RunID] = &runState{outcome: p.Outcome, at: e.Meta.Time}
		}
	case event.TypeTurnStart:
		// A resumed run is running again until its next turn_end.
		if e.Meta.RunID != "" {
			delete(a.runs, e.Meta.RunID)
		}
	case tool.TypeSessionStarted, tool.TypeSessionReused:
		p, ok := e.Payload.(*tool.SessionOpened)
		if !ok {
			return
		}
		ts := a.tool(p.Tool, p.Scope)
		k := sessionKey{p.Tool, p.Scope, p.KeyHash}
		if e.Type == tool.TypeSessionReused {
			ts.Reused++
			if p.KeyHash != "" && len(a.open[k]) > 0 {
				return
			}
		} else {
			ts.Opened++
		}
		s := &Session{Tool: p.Tool, Scope: p.Scope, KeyHash: p.KeyHash, RunID: e.Meta.RunID, SessionID: e.Meta.SessionID,
			OpenedAt: e.Meta.Time, SeenFrom: "started"}
		if e.Type == tool.TypeSessionReused {
			s.SeenFrom = "reused"
		}
		a.open[k] = append(a.open[k], s)
		a.order = append(a.order, s)
	case tool.TypeSessionClosed, tool.TypeSessionCloseFailed:
		p, ok := e.Payload.(*tool.SessionClosed)
		if !ok {
			return
		}
		ts := a.tool(p.Tool, p.Scope)
		if e.Type == tool.TypeSessionClosed {
			ts.Closed[p.Reason]++
		} else {
			ts.Failed[p.Reason]++
			a.failed = append(a.failed, FailedClose{Tool: p.Tool, Scope: p.Scope, KeyHash: p.KeyHash, Reason: p.Reason,
				RunID: e.Meta.RunID, ErrorClass: p.ErrorClass, Error: p.Error, At: e.Meta.Time})
		}
		s := a.claim(sessionKey{p.Tool, p.Scope, p.KeyHash}, e.Meta.RunID)
		if s == nil {
			a.unmatch++
			return
		}
		// A run-scoped session closed after its run ended, by anything but
		// the run's end, outlived the run.
		if p.Scope == "run" && p.Reason != "run-end" && s.RunID != "" {
			if r := a.runs[s.RunID]; r != nil && terminal(r.outcome) {
				if _, seen := a.late[s.RunID]; !seen {
					a.lateRuns = append(a.lateRuns, s.RunID)
				}
				a.late[s.RunID] = append(a.late[s.RunID], LateSession{Tool: p.Tool, KeyHash: p.KeyHash, ClosedBy: p.Reason})
			}
		}
	}
}

// claim removes the open session a close refers to: the one opened by the
// close's run when there is one, else the oldest.
func (a *Auditor) claim(k sessionKey, runID string) *Session {
	list := a.open[k]
	if len(list) == 0 {
		return nil
	}
	i := 0
	for j, s := range list {
		if s.RunID == runID {
			i = j
			break
		}
	}
	s := list[i]
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(a.open, k)
	} else {
		a.open[k] = list
	}
	a.closed[s] = true
	return s
}

func terminal(outcome string) bool {
	switch outcome {
	case event.OutcomeAnswer, event.OutcomeError, event.OutcomeCancelled:
		return true
	}
	return false
}

// Report summarises what the auditor saw.
func (a *Auditor) Report() *Report {
	r := &Report{Events: a.events, FailedCloses: a.failed, UnmatchedCloses: a.unmatch, Open: []Session{}, EndedRuns: []EndedRun{}}
	if r.FailedCloses == nil {
		r.FailedCloses = []FailedClose{}
	}
	ended := map[string]*EndedRun{}
	var endedOrder []string
	endRun := func(runID string) *EndedRun {
		er := ended[runID]
		if er == nil {
			st := a.runs[runID]
			er = &EndedRun{RunID: runID, Outcome: st.outcome, EndedAt: st.at}
			ended[runID] = er
			endedOrder = append(endedOrder, runID)
		}
		return er
	}
	for _, runID := range a.lateRuns {
		er := endRun(runID)
		er.Sessions = append(er.Sessions, a.late[runID]...)
	}
	stillOpen := map[[2]string]int{}
	for _, sp := range a.order {
		if a.closed[sp] {
			continue
		}
		s := *sp
		if st := a.runs[s.RunID]; st != nil && s.RunID != "" {
			s.RunState = st.outcome
		}
		r.Open = append(r.Open, s)
		stillOpen[[2]string{s.Tool, s.Scope}]++
		if s.Scope == "run" && terminal(s.RunState) {
			er := endRun(s.RunID)
			er.Sessions = append(er.Sessions, LateSession{Tool: s.Tool, KeyHash: s.KeyHash})
		}
	}
	for _, id := range endedOrder {
		r.EndedRuns = append(r.EndedRuns, *ended[id])
	}
	for k, ts := range a.tools {
		c := *ts
		c.Open = stillOpen[k]
		r.Tools = append(r.Tools, c)
	}
	slices.SortFunc(r.Tools, func(x, y ToolScope) int {
		if c := strings.Compare(x.Tool, y.Tool); c != 0 {
			return c
		}
		return strings.Compare(x.Scope, y.Scope)
	})
	if r.Tools == nil {
		r.Tools = []ToolScope{}
	}
	return r
}

// Audit reads the files (with their .1 generations) and audits them.
func Audit(paths []string) *Report {
	a := NewAuditor()
	files := Read(Generations(paths), a.Add)
	r := a.Report()
	r.Files = files
	for _, f := range files {
		r.BadLines += f.Bad
	}
	return r
}
