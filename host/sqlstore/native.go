package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

// NativeStore is where the native provider keeps its conversations
// (native.Config.Store), in this database: a record's head (everything
// but the messages) in one row, its messages one row each, appended as
// the conversation grows — a turn writes what it added, not the whole
// conversation again.
func (s *Store) NativeStore() native.Store { return nativeStore{s} }

type nativeStore struct{ s *Store }

// nativeWrite is one record to store: its head, encoded, and its
// messages (a copy of the slice; messages are never changed in place).
type nativeWrite struct {
	binding string
	head    string
	msgs    []llm.Message
}

func (n nativeStore) Load(ctx context.Context, b provider.Binding) (native.Record, error) {
	n.s.nmu.Lock()
	q := n.s.nqueued[string(b)]
	n.s.nmu.Unlock()
	if q != nil {
		// Written behind, not yet in the tables.
		return q.record()
	}
	var head string
	var count int64
	err := n.s.read.QueryRowContext(ctx, n.s.q.nativeLoad, string(b)).Scan(&head, &count)
	if errors.Is(err, sql.ErrNoRows) {
		return native.Record{}, native.ErrNotStored
	}
	if err != nil {
		return native.Record{}, n.s.fail("loading a native conversation", err)
	}
	rows, err := n.s.read.QueryContext(ctx, n.s.q.nativeMsgs, string(b))
	if err != nil {
		return native.Record{}, n.s.fail("loading a native conversation", err)
	}
	defer rows.Close()
	msgs := make([]llm.Message, 0, count)
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return native.Record{}, n.s.fail("loading a native conversation", err)
		}
		var m llm.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return native.Record{}, fmt.Errorf("sqlstore: a stored native message is not JSON: %w", err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return native.Record{}, n.s.fail("loading a native conversation", err)
	}
	if int64(len(msgs)) != count {
		return native.Record{}, n.s.fail("loading a native conversation", fmt.Errorf("%d messages stored, %d recorded", len(msgs), count))
	}
	return (&nativeWrite{head: head, msgs: msgs}).record()
}

// record decodes what w holds.
func (w *nativeWrite) record() (native.Record, error) {
	var r native.Record
	if err := json.Unmarshal([]byte(w.head), &r); err != nil {
		return native.Record{}, fmt.Errorf("sqlstore: a stored native conversation is not JSON: %w", err)
	}
	r.Conversation.Messages = slices.Clone(w.msgs)
	return r, nil
}

func (n nativeStore) Save(ctx context.Context, b provider.Binding, r native.Record) error {
	msgs := slices.Clone(r.Conversation.Messages)
	r.Conversation.Messages = nil
	head, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("sqlstore: encoding a native conversation: %w", err)
	}
	w := &nativeWrite{binding: string(b), head: string(head), msgs: msgs}
	if n.s.saves == nil {
		_, err = n.s.saveAlone(ctx, &saveReq{ctx: ctx, native: w})
		return err
	}
	// Written behind, through the same single writer as the host's saves:
	// the host's save of the same turn comes after it in that writer's
	// order, so it is durable once the host's is — the two writes of a
	// turn cost one commit round, not two. Load reads it meanwhile; a
	// failure is reported by the next Save of its conversation, so
	// nothing is answered that is not saved.
	n.s.nmu.Lock()
	n.s.nqueued[w.binding] = w
	delete(n.s.nfailed, w.binding)
	n.s.nmu.Unlock()
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

// writeNative stores w inside tx: the messages the stored record lacks
// are appended (a conversation only grows under its binding); a record
// with fewer messages than stored replaces them all.
func (s *Store) writeNative(ctx context.Context, tx *sql.Tx, w *nativeWrite) error {
	var stored int64
	s.nmu.Lock()
	n, known := s.nstored[w.binding]
	s.nmu.Unlock()
	if known && s.saves != nil {
		stored = int64(n) // the single writer's own count
	} else {
		err := tx.StmtContext(ctx, s.stmt.nativeCount).QueryRowContext(ctx, w.binding).Scan(&stored)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			stored = 0
		case err != nil:
			return s.fail("saving a native conversation", err)
		}
	}
	if _, err := tx.StmtContext(ctx, s.stmt.nativeSave).ExecContext(ctx, w.binding, w.head, len(w.msgs), micros(time.Now())); err != nil {
		return s.fail("saving a native conversation", err)
	}
	from := stored
	if int64(len(w.msgs)) < stored {
		if _, err := tx.ExecContext(ctx, s.q.nativeClear, w.binding); err != nil {
			return s.fail("saving a native conversation", err)
		}
		from = 0
	}
	for i := from; i < int64(len(w.msgs)); i++ {
		b, err := json.Marshal(w.msgs[i])
		if err != nil {
			return fmt.Errorf("sqlstore: encoding a native message: %w", err)
		}
		if _, err := tx.StmtContext(ctx, s.stmt.nativeAdd).ExecContext(ctx, w.binding, i, string(b)); err != nil {
			return s.fail("saving a native conversation", err)
		}
	}
	return nil
}
