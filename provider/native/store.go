package native

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/provider"
)

// Record is a stored conversation: plain JSON, nothing live.
type Record struct {
	// Conversation holds the messages and the identity the conversation
	// was created under (nil when none).
	Conversation agent.Conversation `json:"conversation"`
	// Turns marks where each completed turn ended, in order, so a branch
	// can copy the conversation through one of them.
	Turns []TurnMark `json:"turns"`
	// Pending is the turn that paused for a person and still waits, or
	// nil: a resumed session comes back waiting on it.
	Pending *PendingTurn `json:"pending,omitempty"`
}

// PendingTurn is a turn that paused for a person (a check-in): the
// approval request it raised, and the agent's checkpoint that answering
// it resumes. Plain JSON, like the rest of the record.
type PendingTurn struct {
	TurnID     string           `json:"turnId"`
	Question   string           `json:"question"`
	Tool       string           `json:"tool,omitempty"`
	Checkpoint agent.Checkpoint `json:"checkpoint"`
}

// request is the approval request the pause raised; its id is the
// checkpoint's.
func (p *PendingTurn) request() provider.Request {
	return provider.Request{ID: p.Checkpoint.ID, Kind: provider.RequestApproval, Prompt: p.Question, Tool: p.Tool, Args: p.args()}
}

// args is the input of the call the pause asks about (the first waiting
// one), from the checkpoint's last assistant message; nil when the
// checkpoint does not hold it.
func (p *PendingTurn) args() json.RawMessage {
	cp := &p.Checkpoint
	if len(cp.Waiting) == 0 || len(cp.Messages) == 0 {
		return nil
	}
	calls := cp.Messages[len(cp.Messages)-1].ToolCalls
	if i := cp.Waiting[0].Index; i >= 0 && i < len(calls) {
		return slices.Clone(calls[i].Args)
	}
	return nil
}

// clone copies what a PendingTurn holds, so nothing is shared.
func (p *PendingTurn) clone() *PendingTurn {
	if p == nil {
		return nil
	}
	c := *p
	cp := &c.Checkpoint
	cp.Tools = slices.Clone(cp.Tools)
	cp.ExtraTools = slices.Clone(cp.ExtraTools)
	cp.Identity = cp.Identity.Clone()
	cp.Messages = slices.Clone(cp.Messages)
	cp.Results = slices.Clone(cp.Results)
	for i, r := range cp.Results {
		if r != nil {
			x := *r
			cp.Results[i] = &x
		}
	}
	cp.Waiting = slices.Clone(cp.Waiting)
	return &c
}

// TurnMark says that the turn ID ended with the conversation's first
// Messages messages.
type TurnMark struct {
	ID       string `json:"id"`
	Messages int    `json:"messages"`
}

// clone copies the slices a Record holds, so a caller's changes never
// reach a stored record. Messages themselves are treated as immutable.
func (r Record) clone() Record {
	r.Conversation.Messages = slices.Clone(r.Conversation.Messages)
	r.Conversation.Identity = r.Conversation.Identity.Clone()
	r.Turns = slices.Clone(r.Turns)
	r.Pending = r.Pending.clone()
	return r
}

// view is r with its slices clipped, to hand to a Store without a copy:
// the session only ever replaces its messages and pending turn and
// appends turn marks, and with no spare capacity shared, none of that
// reaches what the store was given.
func (r Record) view() Record {
	r.Conversation.Messages = slices.Clip(r.Conversation.Messages)
	r.Turns = slices.Clip(r.Turns)
	return r
}

// through returns the record as it stood after turn id.
func (r Record) through(id string) (Record, bool) {
	for i, m := range r.Turns {
		if m.ID == id {
			if m.Messages < 0 || m.Messages > len(r.Conversation.Messages) {
				return Record{}, false
			}
			out := r.clone()
			out.Conversation.Messages = out.Conversation.Messages[:m.Messages:m.Messages]
			out.Turns = out.Turns[: i+1 : i+1]
			out.Pending = nil // a branch continues a completed turn; it waits on nothing
			return out, true
		}
	}
	return Record{}, false
}

// Store keeps conversations by binding. A native instance saves a
// conversation when a session is created or branched and after every turn
// that reaches turn.completed, and loads it to resume or branch. Safe for
// concurrent use.
//
// A Record's slices belong to the caller: Save copies (or encodes) what it
// keeps rather than holding on to them, and Load returns a record the
// caller may keep.
type Store interface {
	// Load returns the record saved under b, or an error wrapping
	// ErrNotStored.
	Load(ctx context.Context, b provider.Binding) (Record, error)
	// Save stores r under b, replacing what was there.
	Save(ctx context.Context, b provider.Binding, r Record) error
}

// ErrNotStored is wrapped by a Store's Load when it holds nothing under the
// binding.
var ErrNotStored = errors.New("native: no record is stored under that binding")

// DefaultMaxConversations bounds a MemoryStore built with a zero bound.
const DefaultMaxConversations = 10000

// MemoryStore is the default Store: conversations in memory, at most a
// fixed number of them. Past the bound the conversation saved least
// recently is forgotten, and resuming it is refused like any unknown
// binding. Each record is kept encoded in one flat byte slice, so what it
// holds is never shared with a caller and costs the garbage collector
// nothing to walk.
type MemoryStore struct {
	max int

	mu    sync.Mutex
	byKey map[provider.Binding]*memoryEntry
	// root links the entries in a ring, most recently saved first.
	root memoryEntry
	n    int
}

type memoryEntry struct {
	prev, next *memoryEntry
	b          provider.Binding
	data       []byte // the encoded record
}

// NewMemoryStore returns an empty store of at most max conversations
// (DefaultMaxConversations when max ≤ 0).
func NewMemoryStore(max int) *MemoryStore {
	if max <= 0 {
		max = DefaultMaxConversations
	}
	m := &MemoryStore{max: max, byKey: map[provider.Binding]*memoryEntry{}}
	m.root.prev, m.root.next = &m.root, &m.root
	return m
}

// Load returns a copy of the record saved under b.
func (m *MemoryStore) Load(_ context.Context, b provider.Binding) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byKey[b]
	if !ok {
		return Record{}, ErrNotStored
	}
	return decodeRecord(e.data)
}

// Save stores a copy of r under b.
func (m *MemoryStore) Save(_ context.Context, b provider.Binding, r Record) error {
	data, err := encodeRecord(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byKey[b]
	if ok {
		e.data = data
		m.unlink(e)
	} else {
		e = &memoryEntry{b: b, data: data}
		m.byKey[b] = e
		m.n++
	}
	m.pushFront(e)
	for m.n > m.max {
		last := m.root.prev
		m.unlink(last)
		delete(m.byKey, last.b)
		m.n--
	}
	return nil
}

func (m *MemoryStore) unlink(e *memoryEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (m *MemoryStore) pushFront(e *memoryEntry) {
	e.prev, e.next = &m.root, m.root.next
	m.root.next.prev = e
	m.root.next = e
}

// Len returns how many conversations the store holds.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}
