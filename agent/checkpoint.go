package agent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// CheckpointVersion is the version of the Checkpoint JSON this package
// writes and reads.
const CheckpointVersion = 1

// Checkpoint is a paused run as plain JSON: the conversation, the tool
// calls of the response it paused in and what each came to so far, the
// run id and the identity. It holds nothing live. Store it anywhere
// (encoding/json) and resume it on an agent with the same ID and tool
// names, in this process or another.
type Checkpoint struct {
	Version int `json:"version"`
	// ID identifies this pause; a resumed or abandoned ID is refused.
	ID string `json:"id"`
	// Agent is Options.ID of the agent that paused.
	Agent string `json:"agent,omitempty"`
	// Tools are the names of the agent's own tools; ExtraTools those of
	// Input.Tools. Both must match on resume.
	Tools      []string `json:"tools"`
	ExtraTools []string `json:"extraTools,omitempty"`
	// RunID is continued by the resume, so run-scoped sessions are reused.
	RunID     string         `json:"runId"`
	SessionID string         `json:"sessionId,omitempty"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	// Iteration counts the model calls so far; the limit spans the run.
	Iteration int `json:"iteration"`
	// Messages end with the assistant message whose calls are settling.
	Messages []llm.Message `json:"messages"`
	// Results holds one entry per call of that message; null while the
	// call waits for a person.
	Results []*CheckpointResult `json:"results"`
	// Waiting lists the calls waiting for a person, the first being the
	// one the pause asks about.
	Waiting []CheckpointWait `json:"waiting"`
	// MAC is set when the agent has a CheckpointKey.
	MAC string `json:"mac,omitempty"`
}

// CheckpointResult is a settled tool call.
type CheckpointResult struct {
	Content    string `json:"content"`
	IsError    bool   `json:"isError,omitempty"`
	ErrorClass string `json:"errorClass,omitempty"`
}

// CheckpointWait is a tool call waiting for a person.
type CheckpointWait struct {
	// Index is the call's position in the assistant message.
	Index    int    `json:"index"`
	Question string `json:"question"`
	// Asked is true when the tool ran and asked mid-call (CheckIn); false
	// when its Spec().CheckIn held it before it ran.
	Asked bool `json:"asked,omitempty"`
}

// ResumeOptions add to a resume what a checkpoint cannot hold.
type ResumeOptions struct {
	// Tools are the run's extra tools (Input.Tools), by the names the
	// checkpoint recorded.
	Tools []tool.Tool
	// SessionID, when set, binds the resumed run to this session instead
	// of the checkpoint's: a conversation re-opened under a new session
	// id (after a restart or an eviction) continues there, with its
	// session-scoped tool sessions and its events. Identity is still the
	// checkpoint's.
	SessionID string
	// Progress is Input.Progress for the resumed run.
	Progress func(event.Event)
	// Limit is Input.Limit for the resumed run.
	Limit func(used llm.TurnUsage) (crossed string)
}

// ParseCheckpoint decodes a stored checkpoint and checks its shape and
// version. It does not check that an agent can resume it; Resume does.
func ParseCheckpoint(data []byte) (Checkpoint, error) {
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Checkpoint{}, &CheckpointError{Field: "json", Problem: "not a checkpoint: " + err.Error()}
	}
	if head.Version != CheckpointVersion {
		return Checkpoint{}, versionError(head.Version)
	}
	var cp Checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return Checkpoint{}, &CheckpointError{Field: "json", Problem: "not a checkpoint: " + err.Error()}
	}
	if err := cp.check(); err != nil {
		return Checkpoint{}, err
	}
	return cp, nil
}

func versionError(v int) error {
	return &CheckpointError{Field: "version", Problem: fmt.Sprintf("version %d is not readable here (this agent reads version %d); resume it with the agentry release that wrote it", v, CheckpointVersion)}
}

// check verifies the shape: everything Resume indexes is in range.
func (cp *Checkpoint) check() error {
	bad := func(field, problem string) error { return &CheckpointError{Field: field, Problem: problem} }
	if cp.Version != CheckpointVersion {
		return versionError(cp.Version)
	}
	if cp.ID == "" {
		return bad("id", "missing")
	}
	if cp.RunID == "" {
		return bad("runId", "missing")
	}
	if cp.Iteration < 1 {
		return bad("iteration", "must be at least 1")
	}
	if len(cp.Messages) == 0 {
		return bad("messages", "empty")
	}
	last := cp.Messages[len(cp.Messages)-1]
	if last.Role != llm.RoleAssistant || len(last.ToolCalls) == 0 {
		return bad("messages", "the last message must be the assistant's tool calls")
	}
	seen := make(map[string]bool, len(last.ToolCalls))
	for _, c := range last.ToolCalls {
		if c.ID == "" || seen[c.ID] {
			return bad("messages", "tool call ids must be present and unique")
		}
		seen[c.ID] = true
		if !json.Valid(c.Args) {
			return bad("messages", "tool call arguments must be JSON")
		}
	}
	if len(cp.Results) != len(last.ToolCalls) {
		return bad("results", fmt.Sprintf("%d results for %d tool calls", len(cp.Results), len(last.ToolCalls)))
	}
	if len(cp.Waiting) == 0 {
		return bad("waiting", "no call waits for a person, so there is nothing to resume")
	}
	waits := make([]bool, len(last.ToolCalls))
	for i, w := range cp.Waiting {
		if w.Index < 0 || w.Index >= len(last.ToolCalls) {
			return bad("waiting", fmt.Sprintf("index %d is out of range", w.Index))
		}
		if i > 0 && w.Index <= cp.Waiting[i-1].Index {
			return bad("waiting", "indexes must increase")
		}
		waits[w.Index] = true
	}
	for i, r := range cp.Results {
		if (r == nil) != waits[i] {
			return bad("results", fmt.Sprintf("call %d must have a result exactly when it is not waiting", i))
		}
	}
	return nil
}

func (a *Agent) mac(cp Checkpoint) string {
	cp.MAC = ""
	b, err := json.Marshal(cp)
	if err != nil {
		return "" // unreachable: normalizeCalls keeps every argument valid JSON
	}
	m := hmac.New(sha256.New, a.cpKey)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// admit checks that this agent may resume cp with the given extra tools.
func (a *Agent) admit(cp *Checkpoint, extra []*toolEntry) error {
	if err := a.ownCheckpoint(*cp); err != nil {
		return err
	}
	if miss, extraNames := diff(cp.Tools, a.toolNames); len(miss)+len(extraNames) > 0 {
		return &CheckpointError{Field: "tools", Problem: "the agent's tool set differs from the one that paused", Missing: miss, Unexpected: extraNames}
	}
	have := make([]string, len(extra))
	for i, e := range extra {
		have[i] = e.spec.Name
	}
	if miss, unexpected := diff(cp.ExtraTools, have); len(miss)+len(unexpected) > 0 {
		return &CheckpointError{Field: "extra tools", Problem: "pass the run's Input.Tools again in ResumeOptions.Tools", Missing: miss, Unexpected: unexpected}
	}
	calls := cp.Messages[len(cp.Messages)-1].ToolCalls
	for _, w := range cp.Waiting {
		name := calls[w.Index].Name
		if _, ok := a.tools[name]; !ok && !slices.Contains(have, name) {
			return &CheckpointError{Field: "waiting", Problem: fmt.Sprintf("the waiting call names tool %q, which neither the agent nor ResumeOptions.Tools has", name)}
		}
	}
	return nil
}

// diff returns the names in want but not in have, and in have but not in
// want, each sorted.
func diff(want, have []string) (missing, unexpected []string) {
	for _, w := range want {
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	for _, h := range have {
		if !slices.Contains(want, h) {
			unexpected = append(unexpected, h)
		}
	}
	slices.Sort(missing)
	slices.Sort(unexpected)
	return missing, unexpected
}

// pause records the run as paused and returns the Pause for the first
// waiting call.
func (r *run) pause(st *State) *Pause {
	a := r.a
	cp := Checkpoint{
		Version:   CheckpointVersion,
		ID:        newID("cp-"),
		Agent:     a.id,
		Tools:     slices.Clone(a.toolNames),
		RunID:     r.id,
		SessionID: r.session,
		Identity:  r.identity.Clone(),
		Iteration: st.Iteration,
		Messages:  slices.Clone(st.Messages),
		Results:   slices.Clone(st.Results),
		Waiting:   slices.Clone(st.Waiting),
	}
	if cp.Tools == nil {
		cp.Tools = []string{}
	}
	for _, e := range r.extra {
		cp.ExtraTools = append(cp.ExtraTools, e.spec.Name)
	}
	slices.Sort(cp.ExtraTools)
	if len(a.cpKey) > 0 {
		cp.MAC = a.mac(cp)
	}
	calls := st.Messages[len(st.Messages)-1].ToolCalls
	p := pausedRun{runID: r.id, sessionID: r.session, asked: askedIDs(r.id, calls, st.Waiting)}
	a.mu.Lock()
	a.paused[cp.ID] = p
	a.mu.Unlock()
	question, name, _ := st.Asking()
	return &Pause{Question: question, ToolName: name, Checkpoint: cp}
}

func askedIDs(runID string, calls []llm.ToolCall, waiting []CheckpointWait) []string {
	var ids []string
	for _, w := range waiting {
		if w.Asked {
			ids = append(ids, doorID(runID, calls[w.Index].ID))
		}
	}
	return ids
}

// Resume continues a paused run — the same run id, the identity the
// checkpoint holds — with a person's decision: approve runs the waiting
// tool call, decline tells the model (with the note). It is ResumeWith
// without extra tools.
func (a *Agent) Resume(ctx context.Context, cp Checkpoint, d Decision) (Result, error) {
	return a.ResumeWith(ctx, cp, d, ResumeOptions{})
}

// ResumeWith is Resume for a run that had extra tools (Input.Tools).
//
// It refuses a checkpoint of another agent or tool set, naming what
// differs (*CheckpointError); one this agent already resumed
// (ErrAlreadyResumed) or abandoned (ErrCheckpointAbandoned); and, while
// the run is running again, an older checkpoint of it.
func (a *Agent) ResumeWith(ctx context.Context, cp Checkpoint, d Decision, opt ResumeOptions) (Result, error) {
	extra, err := a.extraEntries(opt.Tools)
	if err != nil {
		return Result{}, err
	}
	if err := a.admit(&cp, extra); err != nil {
		return Result{}, err
	}
	session := cp.SessionID
	if opt.SessionID != "" {
		session = opt.SessionID
	}
	r, err := a.begin(ctx, cp.RunID, false, session, cp.Identity.Clone(), extra)
	if err != nil {
		return Result{}, err
	}
	defer a.finish(r)
	r.progress, r.limit = opt.Progress, opt.Limit
	if err := a.claim(r, cp.ID); err != nil {
		return Result{RunID: cp.RunID}, err
	}
	st := &State{RunID: cp.RunID, Iteration: cp.Iteration, Messages: make([]llm.Message, len(cp.Messages), len(cp.Messages)+8),
		Results: slices.Clone(cp.Results), Waiting: slices.Clone(cp.Waiting)}
	copy(st.Messages, cp.Messages)
	return r.turn(0, st, &d)
}

// claim marks a checkpoint as resumed, refusing one that was, or whose run
// has moved on.
func (a *Agent) claim(r *run, cpID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, ok := a.spent[cpID]; ok {
		return why
	}
	if err := a.staleLocked(r, r.id, cpID); err != nil {
		return err
	}
	delete(a.paused, cpID)
	a.spendLocked(cpID, ErrAlreadyResumed)
	return nil
}

// staleLocked refuses a checkpoint whose run is running now, or paused
// again under a newer checkpoint.
func (a *Agent) staleLocked(self *run, runID, cpID string) error {
	for o := range a.runs {
		if o != self && o.id == runID {
			return ErrAlreadyResumed
		}
	}
	for id, p := range a.paused {
		if p.runID == runID && id != cpID {
			return ErrAlreadyResumed
		}
	}
	return nil
}

func (a *Agent) spendLocked(cpID string, why error) {
	if _, ok := a.spent[cpID]; !ok {
		a.spentLog = append(a.spentLog, cpID)
	}
	a.spent[cpID] = why
	if len(a.spentLog) > maxSpent {
		delete(a.spent, a.spentLog[0])
		a.spentLog = slices.Delete(a.spentLog, 0, 1)
	}
}

// ownCheckpoint refuses a checkpoint that is malformed, unsigned or
// wrongly signed (when the agent signs them), or written by another agent.
func (a *Agent) ownCheckpoint(cp Checkpoint) error {
	if err := cp.check(); err != nil {
		return err
	}
	if len(a.cpKey) > 0 {
		if cp.MAC == "" {
			return &CheckpointError{Field: "mac", Problem: "the checkpoint is not signed and this agent requires signed checkpoints"}
		}
		if !hmac.Equal([]byte(cp.MAC), []byte(a.mac(cp))) {
			return &CheckpointError{Field: "mac", Problem: "the signature does not match: the checkpoint was changed, or signed with another CheckpointKey"}
		}
	}
	if cp.Agent != a.id {
		return &CheckpointError{Field: "agent", Problem: fmt.Sprintf("written by agent %q, and this is agent %q; resume it on the agent that paused", cp.Agent, a.id)}
	}
	return nil
}

// AbandonCheckpoint gives up a pause nobody will answer: the run's
// run-scoped tool sessions close (reason run-end), and so do the
// call-scoped sessions of calls that asked mid-call. A later Resume of the
// checkpoint is refused with ErrCheckpointAbandoned. It returns how many
// sessions it closed, and works on checkpoints written by another process
// (which has its own sessions: there, it closes none).
func (a *Agent) AbandonCheckpoint(ctx context.Context, cp Checkpoint) (int, error) {
	if _, _, err := a.letGo(cp, ErrCheckpointAbandoned); err != nil {
		return 0, err
	}
	p := pausedRun{runID: cp.RunID, asked: askedIDs(cp.RunID, cp.Messages[len(cp.Messages)-1].ToolCalls, cp.Waiting)}
	return a.closePaused(ctx, p), nil
}

// ReleaseCheckpoint lets go of a pause in this process without giving it
// up: what the paused run holds here closes (its run-scoped tool sessions
// and the call-scoped sessions of calls that asked mid-call, reason
// run-end), and the checkpoint stays resumable — in this process or
// another — as a checkpoint written elsewhere is: the resumed run opens
// new sessions for what it needs. A host uses it when the live session of
// a paused conversation goes (an eviction, a shutdown) and the pause is
// kept for the person to answer later. It refuses what AbandonCheckpoint
// refuses, and returns how many sessions it closed.
func (a *Agent) ReleaseCheckpoint(ctx context.Context, cp Checkpoint) (int, error) {
	p, held, err := a.letGo(cp, nil)
	if err != nil {
		return 0, err
	}
	if !held {
		return 0, nil // paused elsewhere, or already released: nothing is held here
	}
	return a.closePaused(ctx, p), nil
}

func (a *Agent) closePaused(ctx context.Context, p pausedRun) int {
	t := a.tier.Load()
	if t == nil {
		return 0
	}
	n := t.FireRun(ctx, p.runID)
	for _, id := range p.asked {
		n += t.FireCall(ctx, id)
	}
	return n
}

// letGo is what AbandonCheckpoint and ReleaseCheckpoint share: it refuses
// a checkpoint that is not this agent's, already spent or stale, and
// otherwise forgets the pause held here (returning it, when there was
// one). A non-nil spend marks the checkpoint spent with that error, so
// later resumes are refused with it.
func (a *Agent) letGo(cp Checkpoint, spend error) (pausedRun, bool, error) {
	if err := a.ownCheckpoint(cp); err != nil {
		return pausedRun{}, false, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, ok := a.spent[cp.ID]; ok {
		return pausedRun{}, false, why
	}
	if err := a.staleLocked(nil, cp.RunID, cp.ID); err != nil {
		return pausedRun{}, false, err
	}
	p, held := a.paused[cp.ID]
	delete(a.paused, cp.ID)
	if spend != nil {
		a.spendLocked(cp.ID, spend)
	}
	return p, held, nil
}
