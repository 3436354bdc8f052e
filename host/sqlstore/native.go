package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

// NativeStore is where the native provider keeps its conversations
// (native.Config.Store), in this database: a record's head (everything
// but its messages and turn marks) in one row, its messages and its turn
// marks one row each, appended as the conversation grows — a turn writes
// what it added, not the whole conversation again.
func (s *Store) NativeStore() native.Store { return nativeStore{s} }

type nativeStore struct{ s *Store }

// nativeWrite is one record to store: its head, encoded, its messages (a
// copy of the slice; messages are never changed in place) and its turn
// marks.
type nativeWrite struct {
	binding string
	head    string
	msgs    []llm.Message
	turns   []native.TurnMark
	pending bool // the record holds a paused turn
}

// nativeCount is how many messages and turn marks a stored record has,
// and whether it holds a paused turn.
type nativeCount struct {
	msgs, turns int
	pending     bool
}

func (n nativeStore) Load(ctx context.Context, b provider.Binding) (native.Record, error) {
	n.s.nmu.Lock()
	q := n.s.nqueued[string(b)]
	n.s.nmu.Unlock()
	if q != nil {
		// Written behind, not yet in the tables.
		return q.record()
	}
	w, err := n.s.loadNative(ctx, string(b))
	if err != nil {
		return native.Record{}, err
	}
	rec, err := w.record()
	if err == nil && n.s.saves == nil {
		// What is stored, for this process's next save (the single
		// writer's books say so already).
		n.s.nmu.Lock()
		n.s.nstored[string(b)] = nativeCount{msgs: len(w.msgs), turns: len(w.turns), pending: rec.Pending != nil}
		n.s.nmu.Unlock()
	}
	return rec, err
}

func (s *Store) loadNative(ctx context.Context, b string) (*nativeWrite, error) {
	w := &nativeWrite{binding: b}
	var msgs, turns int64
	err := s.read.QueryRowContext(ctx, s.q.nativeLoad, b).Scan(&w.head, &msgs, &turns)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, native.ErrNotStored
	}
	if err != nil {
		return nil, s.fail("loading a native conversation", err)
	}
	rows, err := s.read.QueryContext(ctx, s.q.nativeMsgs, b, msgs) // as counted: a later save appends past them
	if err != nil {
		return nil, s.fail("loading a native conversation", err)
	}
	defer rows.Close()
	w.msgs = make([]llm.Message, 0, msgs)
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, s.fail("loading a native conversation", err)
		}
		var m llm.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("sqlstore: a stored native message is not JSON: %w", err)
		}
		w.msgs = append(w.msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("loading a native conversation", err)
	}
	rows.Close()
	if int64(len(w.msgs)) != msgs {
		return nil, s.fail("loading a native conversation", fmt.Errorf("%d messages stored, %d recorded", len(w.msgs), msgs))
	}
	if turns == 0 {
		return w, nil
	}
	trows, err := s.read.QueryContext(ctx, s.q.nativeTurns, b, turns)
	if err != nil {
		return nil, s.fail("loading a native conversation", err)
	}
	defer trows.Close()
	w.turns = make([]native.TurnMark, 0, turns)
	for trows.Next() {
		var m native.TurnMark
		if err := trows.Scan(&m.ID, &m.Messages); err != nil {
			return nil, s.fail("loading a native conversation", err)
		}
		w.turns = append(w.turns, m)
	}
	if err := trows.Err(); err != nil {
		return nil, s.fail("loading a native conversation", err)
	}
	if int64(len(w.turns)) != turns {
		return nil, s.fail("loading a native conversation", fmt.Errorf("%d turn marks stored, %d recorded", len(w.turns), turns))
	}
	return w, nil
}

// record decodes what w holds.
func (w *nativeWrite) record() (native.Record, error) {
	var r native.Record
	if err := json.Unmarshal([]byte(w.head), &r); err != nil {
		return native.Record{}, fmt.Errorf("sqlstore: a stored native conversation is not JSON: %w", err)
	}
	r.Conversation.Messages = slices.Clone(w.msgs)
	r.Turns = slices.Clone(w.turns)
	return r, nil
}

func (n nativeStore) Save(ctx context.Context, b provider.Binding, r native.Record) error {
	msgs, turns := slices.Clone(r.Conversation.Messages), slices.Clone(r.Turns)
	r.Conversation.Messages, r.Turns = nil, nil
	head, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("sqlstore: encoding a native conversation: %w", err)
	}
	w := &nativeWrite{binding: string(b), head: string(head), msgs: msgs, turns: turns, pending: r.Pending != nil}
	n.s.nmu.Lock()
	was, known := n.s.nstored[w.binding]
	if q := n.s.nqueued[w.binding]; q != nil {
		was, known = nativeCount{pending: q.pending}, true
	}
	now := !known || was.pending != w.pending                  // a pause stored or given up (or nothing known)
	alone := !now && n.s.saves == nil && !host.SavesAfter(ctx) // no single writer, and no host save to carry it
	if n.s.saves == nil && (now || alone) {
		// This write holds the whole record: one waiting for a host save
		// is older, and must not land after it.
		delete(n.s.nqueued, w.binding)
	}
	n.s.nmu.Unlock()
	switch {
	case now:
		// A pause stored or given up lands before Save returns: a turn
		// whose pause was answered runs only once the answer is stored,
		// so a process that dies meanwhile cannot bring the pause back
		// to be answered, and run, twice.
		_, err := n.s.submit(ctx, &saveReq{ctx: ctx, native: w})
		if n.s.saves == nil { // no single writer keeps the books: keep them here
			n.s.noteStored(w, err)
		}
		return err
	case alone:
		// Nobody's save will carry it (a durable turn's activity, say).
		_, err := n.s.saveAlone(ctx, &saveReq{ctx: ctx, native: w})
		n.s.noteStored(w, err)
		return err
	}
	// Written behind, durable with the host's save of the same turn, so
	// the two writes of a turn cost one commit: with a single writer
	// (SQLite) it goes through the writer ahead of the host's save;
	// otherwise the host's save of the conversation bound to it writes it
	// in its own transaction (if that save fails, this is not written
	// either, and the next save of the record writes it whole). Load
	// reads it meanwhile; a failure is reported by the next Save of its
	// conversation, so nothing is answered that is not saved.
	n.s.nmu.Lock()
	n.s.nqueued[w.binding] = w
	delete(n.s.nfailed, w.binding)
	n.s.nmu.Unlock()
	if n.s.saves == nil {
		return nil
	}
	select {
	case n.s.saves <- &saveReq{ctx: context.WithoutCancel(ctx), native: w}:
		return nil
	case <-n.s.stopped:
		n.s.nmu.Lock()
		delete(n.s.nqueued, w.binding)
		n.s.nmu.Unlock()
		return n.s.fail("saving a native conversation", errors.New("the store is closed"))
	}
}

// noteStored keeps the books of a native write made without the single
// writer: whether the record holds a pause, as this process last wrote
// it (nothing known after a failure).
func (s *Store) noteStored(w *nativeWrite, err error) {
	s.nmu.Lock()
	defer s.nmu.Unlock()
	if err != nil {
		delete(s.nstored, w.binding)
		return
	}
	s.nstored[w.binding] = nativeCount{msgs: len(w.msgs), turns: len(w.turns), pending: w.pending}
}

// takeQueued removes and returns the native write of binding b that waits
// for the host's save, where there is no single writer (nil otherwise).
func (s *Store) takeQueued(b string) *nativeWrite {
	if s.saves != nil || b == "" {
		return nil
	}
	s.nmu.Lock()
	defer s.nmu.Unlock()
	w := s.nqueued[b]
	delete(s.nqueued, b)
	return w
}

// flushQueued writes each native write still waiting for a host save, in
// a transaction of its own (at Close, when no such save will come).
func (s *Store) flushQueued(ctx context.Context) error {
	s.nmu.Lock()
	var ws []*nativeWrite
	for b, w := range s.nqueued {
		ws = append(ws, w)
		delete(s.nqueued, b)
	}
	s.nmu.Unlock()
	var errs []error
	for _, w := range ws {
		if _, err := s.saveAlone(ctx, &saveReq{ctx: ctx, native: w}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeNative stores w inside tx: the messages and turn marks the stored
// record lacks are appended (a conversation only grows under its
// binding); a record with fewer of either than stored replaces them all.
func (s *Store) writeNative(ctx context.Context, tx *sql.Tx, w *nativeWrite, inTx map[string]nativeCount) error {
	stored, known := inTx[w.binding] // an earlier write of this transaction
	if !known {
		s.nmu.Lock()
		stored, known = s.nstored[w.binding]
		s.nmu.Unlock()
	}
	if !known || s.saves == nil { // only the single writer's own count can be trusted
		var msgs, turns int64
		err := tx.StmtContext(ctx, s.stmt.nativeCount).QueryRowContext(ctx, w.binding).Scan(&msgs, &turns)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			stored = nativeCount{}
		case err != nil:
			return s.fail("saving a native conversation", err)
		default:
			stored = nativeCount{msgs: int(msgs), turns: int(turns)}
		}
	}
	if _, err := tx.StmtContext(ctx, s.stmt.nativeSave).ExecContext(ctx, w.binding, w.head, len(w.msgs), len(w.turns), micros(time.Now())); err != nil {
		return s.fail("saving a native conversation", err)
	}
	from := stored.msgs
	if len(w.msgs) < from {
		if _, err := tx.ExecContext(ctx, s.q.nativeClear, w.binding); err != nil {
			return s.fail("saving a native conversation", err)
		}
		from = 0
	}
	if err := s.appendRows(ctx, tx, s.stmt.nativeAdd, s.stmt.nativeAdds, w.binding, from, len(w.msgs)-from,
		func(i int) ([]byte, error) { return json.Marshal(w.msgs[from+i]) }); err != nil {
		return s.fail("saving a native conversation", err)
	}
	from = stored.turns
	if len(w.turns) < from {
		if _, err := tx.ExecContext(ctx, s.q.nativeClearTurns, w.binding); err != nil {
			return s.fail("saving a native conversation", err)
		}
		from = 0
	}
	if from < len(w.turns) {
		add := tx.StmtContext(ctx, s.stmt.nativeAddTurn)
		for i := from; i < len(w.turns); i++ {
			if _, err := add.ExecContext(ctx, w.binding, i, w.turns[i].ID, w.turns[i].Messages); err != nil {
				return s.fail("saving a native conversation", err)
			}
		}
	}
	if inTx != nil {
		inTx[w.binding] = nativeCount{msgs: len(w.msgs), turns: len(w.turns), pending: w.pending}
	}
	return nil
}
