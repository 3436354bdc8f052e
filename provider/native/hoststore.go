package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
)

// HostStore keeps conversations in the host's store, through the port
// the host offers providers for their own records (host.Records;
// host/sqlstore's Store is one), so they live in the host's database and
// a restarted host resumes every conversation from its binding. A record
// is kept as its head (everything but its messages and turn marks, as
// JSON), its messages and its turn marks, one row each, appended as the
// conversation grows: a turn writes what it added, not the conversation
// again.
//
// In a turn the host runs, a save goes in the host's save of the turn's
// end (host.SaveRecord): one commit for the turn, and nothing of a turn
// the host could not save. A save that stores a pause or gives one up is
// written before Save returns: a turn whose pause was answered goes on
// only once the answer is stored, so a process that dies meanwhile cannot
// bring the pause back to be answered, and run, twice. So is a save
// outside a host turn (a durable turn's activity) and the first save of a
// record this process has not seen.
func HostStore(rs host.Records) Store {
	return &hostStore{rs: rs, paused: map[provider.Binding]bool{}}
}

type hostStore struct {
	rs host.Records

	mu sync.Mutex
	// paused says whether each record holds a pause, as this process last
	// wrote or read it.
	paused map[provider.Binding]bool
}

// maxPausedBooks bounds the books: past it they start afresh, and the
// next save of each record is written at once.
const maxPausedBooks = 1 << 16

func (h *hostStore) Load(ctx context.Context, b provider.Binding) (Record, error) {
	sr, err := h.rs.LoadRecord(ctx, b)
	if errors.Is(err, host.ErrNoRecord) {
		return Record{}, ErrNotStored
	}
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(sr.Head, &r); err != nil {
		return Record{}, fmt.Errorf("native: a stored conversation is not JSON: %w", err)
	}
	r.Conversation.Messages = make([]llm.Message, len(sr.Entries))
	for i, raw := range sr.Entries {
		if err := json.Unmarshal(raw, &r.Conversation.Messages[i]); err != nil {
			return Record{}, fmt.Errorf("native: a stored message is not JSON: %w", err)
		}
	}
	r.Turns = nil
	for _, m := range sr.Marks {
		r.Turns = append(r.Turns, TurnMark{ID: m.TurnID, Messages: m.Entries})
	}
	h.note(b, r.Pending != nil, true)
	return r, nil
}

func (h *hostStore) Save(ctx context.Context, b provider.Binding, r Record) error {
	msgs := slices.Clone(r.Conversation.Messages) // the caller's; the write may wait for the host's save
	marks := make([]host.RecordMark, len(r.Turns))
	for i, m := range r.Turns {
		marks[i] = host.RecordMark{TurnID: m.ID, Entries: m.Messages}
	}
	r.Conversation.Messages, r.Turns = nil, nil
	head, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("native: encoding a conversation: %w", err)
	}
	w := host.RecordWrite{Binding: b, Record: host.Record{Head: head, Entries: len(msgs), Marks: marks,
		Entry: func(i int) ([]byte, error) { return json.Marshal(msgs[i]) }}}
	pending := r.Pending != nil
	h.mu.Lock()
	was, known := h.paused[b]
	h.mu.Unlock()
	err = host.SaveRecord(ctx, h.rs, w, known && was == pending)
	h.note(b, pending, err == nil)
	return err
}

// note keeps the books of whether b's record holds a pause (forgotten
// after a failed write: what is stored is not known then).
func (h *hostStore) note(b provider.Binding, pending, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !ok {
		delete(h.paused, b)
		return
	}
	if len(h.paused) >= maxPausedBooks {
		clear(h.paused)
	}
	h.paused[b] = pending
}
