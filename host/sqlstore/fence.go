package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// fenceIn takes the conversation's row for a write under f's epoch inside
// tx, and refuses (ErrFenced, ErrNotFound) with nothing written when a
// newer epoch has written it.
func (s *Store) fenceIn(ctx context.Context, tx *sql.Tx, f *host.Fence) error {
	res, err := tx.StmtContext(ctx, s.stmt.fence).ExecContext(ctx, f.Epoch, f.Conversation, f.Owner.Tenant, f.Owner.Principal, f.Epoch)
	if err != nil {
		return s.fail("checking a conversation's lease epoch", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.fail("checking a conversation's lease epoch", err)
	} else if n == 1 {
		return nil
	}
	var epoch int64
	var forwards, state string
	err = tx.QueryRowContext(ctx, s.q.fenceState, f.Conversation, f.Owner.Tenant, f.Owner.Principal).Scan(&epoch, &forwards, &state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return host.ErrNotFound
	case err != nil:
		return s.fail("checking a conversation's lease epoch", err)
	}
	return host.ErrFenced
}

// The forwards column logs, space-separated and most recent last, the
// forwarded requests that began ("+ID") and those their forwarder gave up
// on ("-ID"); ids are the host's, made of characters LIKE takes as they
// are.
func forwardEntry(sign byte, id string) string { return " " + string(sign) + id }

func forwardPattern(sign byte, id string) string { return "%" + forwardEntry(sign, id) + "%" }

// validForward accepts the ids a host makes: short, no spaces, nothing
// LIKE would read as a wildcard or an escape.
func validForward(id string) bool {
	return id != "" && len(id) <= 64 && !strings.ContainsAny(id, " %_\\")
}

// BeginTurn records the turn b as begun on the conversation, under epoch.
func (s *Store) BeginTurn(ctx context.Context, owner tool.Identity, id string, epoch int64, b host.Begun) error {
	var begun sql.NullString // a zero b: none in flight
	if b.RunID != "" {
		raw, err := json.Marshal(b)
		if err != nil {
			return err
		}
		begun = sql.NullString{String: string(raw), Valid: true}
	}
	var res sql.Result
	var err error
	if b.Forward == "" {
		res, err = s.write.ExecContext(ctx, s.q.begin, epoch, begun, id, owner.Tenant, owner.Principal, epoch)
	} else {
		if !validForward(b.Forward) {
			return errors.New("sqlstore: a forwarded request's id is empty, longer than 64 bytes, or holds a space, %, _ or \\")
		}
		res, err = s.write.ExecContext(ctx, s.q.beginForward, epoch, begun, forwardEntry('+', b.Forward),
			id, owner.Tenant, owner.Principal, epoch, forwardPattern('-', b.Forward))
	}
	if err != nil {
		return s.fail("recording a turn in flight", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.fail("recording a turn in flight", err)
	} else if n == 1 {
		return nil
	}
	return s.whyNotBegun(ctx, owner, id, epoch, b.Forward)
}

// whyNotBegun says why BeginTurn changed nothing.
func (s *Store) whyNotBegun(ctx context.Context, owner tool.Identity, id string, epoch int64, forward string) error {
	var stored int64
	var forwards, state string
	err := s.write.QueryRowContext(ctx, s.q.fenceState, id, owner.Tenant, owner.Principal).Scan(&stored, &forwards, &state)
	switch {
	case errors.Is(err, sql.ErrNoRows), err == nil && state == string(host.StateClosed):
		return host.ErrNotFound
	case err != nil:
		return s.fail("recording a turn in flight", err)
	case stored > epoch:
		return host.ErrFenced
	case forward != "" && strings.Contains(forwards, forwardEntry('-', forward)):
		return host.ErrForwardVoided
	}
	return s.fail("recording a turn in flight", errors.New("the conversation's row did not change and nothing says why"))
}

// VoidForward gives up the forwarded request forward, unless it began.
func (s *Store) VoidForward(ctx context.Context, owner tool.Identity, id, forward string) (bool, error) {
	if !validForward(forward) {
		return false, errors.New("sqlstore: a forwarded request's id is empty, longer than 64 bytes, or holds a space, %, _ or \\")
	}
	res, err := s.write.ExecContext(ctx, s.q.void, forwardEntry('-', forward), id, owner.Tenant, owner.Principal, forwardPattern('+', forward))
	if err != nil {
		return false, s.fail("giving up a forwarded request", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, s.fail("giving up a forwarded request", err)
	} else if n == 1 {
		return false, nil
	}
	var stored int64
	var forwards, state string
	err = s.write.QueryRowContext(ctx, s.q.fenceState, id, owner.Tenant, owner.Principal).Scan(&stored, &forwards, &state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, host.ErrNotFound
	case err != nil:
		return false, s.fail("giving up a forwarded request", err)
	}
	return true, nil
}
