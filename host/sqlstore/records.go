package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
)

var (
	_ host.Records       = (*Store)(nil)
	_ host.RecordDropper = (*Store)(nil)
)

// recordCount is how many entries and marks a stored record has.
type recordCount struct{ entries, marks int }

// LoadRecord returns the provider record stored under b: its head, its
// entries as stored and its marks (host.ErrNoRecord when there is none).
func (s *Store) LoadRecord(ctx context.Context, b provider.Binding) (host.StoredRecord, error) {
	var (
		r             host.StoredRecord
		head          string
		entries, mark int64
	)
	err := s.read.QueryRowContext(ctx, s.q.recordLoad, string(b)).Scan(&head, &entries, &mark)
	if errors.Is(err, sql.ErrNoRows) {
		return host.StoredRecord{}, host.ErrNoRecord
	}
	if err != nil {
		return host.StoredRecord{}, s.fail("loading a provider record", err)
	}
	r.Head = []byte(head)
	// As counted: a later write appends past them.
	if r.Entries, err = s.loadEntries(ctx, string(b), entries); err != nil {
		return host.StoredRecord{}, err
	}
	if mark == 0 {
		return r, nil
	}
	if r.Marks, err = s.loadMarks(ctx, string(b), mark); err != nil {
		return host.StoredRecord{}, err
	}
	return r, nil
}

func (s *Store) loadEntries(ctx context.Context, b string, n int64) ([][]byte, error) {
	rows, err := s.read.QueryContext(ctx, s.q.recordEntries, b, n)
	if err != nil {
		return nil, s.fail("loading a provider record", err)
	}
	defer rows.Close()
	out := make([][]byte, 0, n)
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, s.fail("loading a provider record", err)
		}
		out = append(out, raw)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("loading a provider record", err)
	}
	if int64(len(out)) != n {
		return nil, s.fail("loading a provider record", fmt.Errorf("%d entries stored, %d recorded", len(out), n))
	}
	return out, nil
}

func (s *Store) loadMarks(ctx context.Context, b string, n int64) ([]host.RecordMark, error) {
	rows, err := s.read.QueryContext(ctx, s.q.recordMarks, b, n)
	if err != nil {
		return nil, s.fail("loading a provider record", err)
	}
	defer rows.Close()
	out := make([]host.RecordMark, 0, n)
	for rows.Next() {
		var m host.RecordMark
		if err := rows.Scan(&m.TurnID, &m.Entries); err != nil {
			return nil, s.fail("loading a provider record", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("loading a provider record", err)
	}
	if int64(len(out)) != n {
		return nil, s.fail("loading a provider record", fmt.Errorf("%d turn marks stored, %d recorded", len(out), n))
	}
	return out, nil
}

// SaveRecord writes a provider record at once, in a transaction of its
// own (with SQLite, through the single writer).
func (s *Store) SaveRecord(ctx context.Context, w host.RecordWrite) error {
	if w.Record.Entries > 0 && w.Record.Entry == nil {
		return errors.New("sqlstore: a record with entries needs Record.Entry to encode them")
	}
	_, err := s.submit(ctx, &saveReq{ctx: ctx, record: &w})
	return err
}

// Marked reports whether the record under b marks the turn turnID.
func (s *Store) Marked(ctx context.Context, b provider.Binding, turnID string) (bool, error) {
	var n int64
	if err := s.read.QueryRowContext(ctx, s.q.recordMarked, string(b), turnID).Scan(&n); err != nil {
		return false, s.fail("reading a provider record", err)
	}
	return n > 0, nil
}

// noteStored keeps the single writer's books once a transaction that
// wrote records has committed.
func (s *Store) noteStored(inTx map[string]recordCount) {
	if s.saves == nil || len(inTx) == 0 {
		return
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for b, n := range inTx {
		s.rstored[b] = n
	}
}

// storedCount is how many entries and marks the record under b has in
// the tables, as tx sees them: from an earlier write of the same
// transaction, from the single writer's books, or read.
func (s *Store) storedCount(ctx context.Context, tx *sql.Tx, b string, inTx map[string]recordCount) (recordCount, error) {
	if n, ok := inTx[b]; ok {
		return n, nil
	}
	if s.saves != nil { // only the single writer's own books can be trusted
		s.rmu.Lock()
		n, ok := s.rstored[b]
		s.rmu.Unlock()
		if ok {
			return n, nil
		}
	}
	var entries, marks int64
	err := tx.StmtContext(ctx, s.stmt.recordCount).QueryRowContext(ctx, b).Scan(&entries, &marks)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return recordCount{}, nil
	case err != nil:
		return recordCount{}, s.fail("saving a provider record", err)
	}
	return recordCount{entries: int(entries), marks: int(marks)}, nil
}

// writeRecord stores w inside tx: the entries and marks the stored record
// lacks are appended (a record only grows under its binding); a record
// with fewer of either than stored replaces them all.
func (s *Store) writeRecord(ctx context.Context, tx *sql.Tx, w *host.RecordWrite, inTx map[string]recordCount) error {
	b, r := string(w.Binding), w.Record
	if b == "" {
		return errors.New("sqlstore: a provider record needs a binding to be stored under")
	}
	stored, err := s.storedCount(ctx, tx, b, inTx)
	if err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, s.stmt.recordSave).ExecContext(ctx, b, string(r.Head), r.Entries, len(r.Marks), micros(time.Now())); err != nil {
		return s.fail("saving a provider record", err)
	}
	from := stored.entries
	if r.Entries < from {
		if _, err := tx.ExecContext(ctx, s.q.recordClear, b); err != nil {
			return s.fail("saving a provider record", err)
		}
		from = 0
	}
	if err := s.appendRows(ctx, tx, s.stmt.recordAdd, s.stmt.recordAdds, b, from, r.Entries-from,
		func(i int) ([]byte, error) { return r.Entry(from + i) }); err != nil {
		return s.fail("saving a provider record", err)
	}
	from = stored.marks
	if len(r.Marks) < from {
		if _, err := tx.ExecContext(ctx, s.q.recordClearMarks, b); err != nil {
			return s.fail("saving a provider record", err)
		}
		from = 0
	}
	if from < len(r.Marks) {
		add := tx.StmtContext(ctx, s.stmt.recordAddMark)
		for i := from; i < len(r.Marks); i++ {
			if _, err := add.ExecContext(ctx, b, i, r.Marks[i].TurnID, r.Marks[i].Entries); err != nil {
				return s.fail("saving a provider record", err)
			}
		}
	}
	inTx[b] = recordCount{entries: r.Entries, marks: len(r.Marks)}
	return nil
}
