package durable

import (
	"context"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// watch is the live view of one turn that a caller on this replica
// follows: activities running here hand it their outputs as they make
// them. It is only a view — the workflow's history is the truth, and the
// turn's result lists every step, so what the view missed (an activity
// on another replica, a caller too slow to take it) is given at the end.
type watch struct {
	ch   chan live     // unbuffered: a push returns once the follower has it
	done chan struct{} // closed when the follower stops
	wait time.Duration // how long a push waits for the follower
	// limit is the follower's limit for the turn (TurnRequest.Limit,
	// Resolution.Limit), asked by the limit activity; nil: none.
	limit func(llm.TurnUsage) string
}

// live is one output and the step it stands for.
type live struct {
	key string
	out provider.Output
}

// stepKey names what a live output stands for: the model's text of an
// iteration, or the start or end of a tool call of one (a model may give
// two iterations' calls one id).
func stepKey(what string, iteration int, callID string) string {
	return what + "/" + strconv.Itoa(iteration) + "/" + callID
}

// push hands o to the follower, unless it stopped or does not take it
// within the bound: the turn never waits long on its caller. A nil watch
// (nobody follows the turn here) takes nothing.
func (w *watch) push(ctx context.Context, key string, o provider.Output) {
	if w == nil {
		return
	}
	t := time.NewTimer(w.wait)
	defer t.Stop()
	select {
	case w.ch <- live{key: key, out: o}:
	case <-w.done:
	case <-ctx.Done():
	case <-t.C:
	}
}

// watch registers a live view of the workflow wid, whose follower holds
// limit; stop ends it.
func (in *instance) watch(wid string, limit func(llm.TurnUsage) string) (w *watch, stop func()) {
	w = &watch{ch: make(chan live), done: make(chan struct{}), wait: in.cfg.Heartbeat, limit: limit}
	in.mu.Lock()
	in.watches[wid] = w
	in.mu.Unlock()
	return w, func() {
		in.mu.Lock()
		if in.watches[wid] == w {
			delete(in.watches, wid)
		}
		in.mu.Unlock()
		close(w.done)
	}
}

// watching is the live view of the turn an activity belongs to, when its
// caller is on this replica; nil otherwise.
func (in *instance) watching(ctx context.Context) *watch {
	if !activity.IsActivity(ctx) {
		return nil
	}
	wid := activity.GetInfo(ctx).WorkflowExecution.ID
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.watches[wid]
}

// lent is the tool that the conversation's session open on this replica
// borrows from its host binding, or nil.
func (in *instance) lent(b provider.Binding, name string) tool.Tool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, s := range in.sessions {
		if s.binding == b {
			return s.lent[name]
		}
	}
	return nil
}

// meta is the event meta of a turn's events: the turn is the run.
func (in *instance) meta(sessionID, turnID string, id *tool.Identity) event.Meta {
	m := event.Meta{RunID: turnID, SessionID: sessionID, AgentID: in.cfg.Key}
	if id != nil {
		m.Tenant, m.Principal = id.Tenant, id.Principal
	}
	return m
}

func (in *instance) emit(typ event.Type, payload any, meta event.Meta) {
	if in.cfg.Events != nil {
		in.cfg.Events(event.Event{Type: typ, Payload: payload, Meta: meta})
	}
}

// reportClose turns a teardown report into its event; the meta is the
// registration's origin.
func (in *instance) reportClose(rep toolsession.Report) {
	if in.cfg.Events == nil {
		return
	}
	e := tool.CloseEvent(rep)
	e.Meta.AgentID = in.cfg.Key
	in.cfg.Events(e)
}

// registrar registers a tool call's cleanups with the tier and announces
// the session with the turn's meta.
func (in *instance) registrar(meta event.Meta) func(toolsession.Origin, func(context.Context) error, toolsession.Options) toolsession.Outcome {
	return func(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
		out := in.tier.Register(o, cleanup, opt)
		if in.cfg.Events != nil {
			e := tool.SessionEvent(o, opt, out)
			e.Meta = meta
			in.cfg.Events(e)
		}
		return out
	}
}

// holder pins the session a call uses, or reserves room for a new one;
// waiting for room, and a refusal, are announced.
func (in *instance) holder(meta event.Meta) tool.Holder {
	return func(ctx context.Context, o toolsession.Origin, opt toolsession.Options) (*toolsession.Lease, error) {
		l, err := in.tier.Hold(ctx, o, opt)
		if e, ok := tool.CapacityEvent(o, opt, l, err); ok && in.cfg.Events != nil {
			e.Meta = meta
			in.cfg.Events(e)
		}
		return l, err
	}
}

// toolEvent carries what a tool emits (tool.Call.Emit) to the sink.
func (in *instance) toolEvent(meta event.Meta) func(event.Event) {
	return func(e event.Event) {
		if in.cfg.Events == nil {
			return
		}
		if e.Meta.AgentID == "" {
			e.Meta.AgentID = meta.AgentID
		}
		in.cfg.Events(e)
	}
}
