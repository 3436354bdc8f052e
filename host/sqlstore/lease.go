package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// LeaseOptions configure [Store.Leases].
type LeaseOptions struct {
	// Replica is this process: Address (required) is the base URL the
	// other replicas reach it at; ID defaults to a new random one.
	Replica host.Replica
	// TTL is how long a lease lasts unrenewed (default
	// host.DefaultLeaseTTL).
	TTL time.Duration
}

// Leases are the conversations' ownership leases, in a table of the
// store's database: one row per conversation some replica holds, with the
// holder, its address and the lease's expiry in the database's own clock
// (so replicas' clocks need not agree). Taking a lease is one INSERT … ON
// CONFLICT … WHERE that succeeds only when the row is free, lapsed or the
// taker's own; a clean release deletes the row, so a row of another
// replica that has lapsed means that replica stopped renewing it. It is a
// host.Leases, for PostgreSQL.
type Leases struct {
	s    *Store
	self host.Replica
	ttl  time.Duration
	secs float64
}

var _ host.Leases = (*Leases)(nil)

var leaseSchema = []string{
	`CREATE SEQUENCE IF NOT EXISTS agentry_lease_epochs`,
	`CREATE TABLE IF NOT EXISTS agentry_leases (
		conversation_id TEXT PRIMARY KEY REFERENCES agentry_conversations (id),
		replica         TEXT NOT NULL,
		address         TEXT NOT NULL,
		epoch           BIGINT NOT NULL,
		taken_from      TEXT NOT NULL,
		expires         TIMESTAMPTZ NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS agentry_leases_replica ON agentry_leases (replica)`,
}

const (
	// A claim inserts a lease for the owner's open conversation, or takes
	// the row over when it is this replica's or has lapsed. The SET sees
	// the row as it is once locked, so of two replicas claiming at once
	// exactly one wins. A new holding's epoch goes on the conversation in
	// the same statement: from then on the store refuses every write of
	// it under an older epoch (host.ErrFenced), so the replica that held
	// it before changes nothing, even if it does not know yet that it
	// lost it.
	claimSQL = `WITH l AS (
		INSERT INTO agentry_leases (conversation_id, replica, address, epoch, taken_from, expires)
		SELECT c.id, $4, $5, nextval('agentry_lease_epochs'), '', clock_timestamp() + make_interval(secs => $6)
		FROM agentry_conversations c
		WHERE c.id = $1 AND c.tenant = $2 AND c.principal = $3 AND c.state <> 'closed'
		ON CONFLICT (conversation_id) DO UPDATE SET
			epoch = CASE WHEN agentry_leases.replica = excluded.replica THEN agentry_leases.epoch ELSE excluded.epoch END,
			taken_from = CASE WHEN agentry_leases.replica = excluded.replica THEN agentry_leases.taken_from ELSE agentry_leases.replica END,
			replica = excluded.replica,
			address = excluded.address,
			expires = excluded.expires
		WHERE agentry_leases.replica = excluded.replica OR agentry_leases.expires <= clock_timestamp()
		RETURNING conversation_id, epoch, taken_from
	), fenced AS (
		UPDATE agentry_conversations c SET epoch = l.epoch FROM l WHERE c.id = l.conversation_id AND c.epoch < l.epoch
	)
	SELECT epoch, taken_from FROM l`
	holderSQL = `SELECT replica, address, EXTRACT(EPOCH FROM expires - clock_timestamp())::float8
		FROM agentry_leases WHERE conversation_id = $1 AND expires > clock_timestamp()`
	renewSQL = `UPDATE agentry_leases SET expires = clock_timestamp() + make_interval(secs => $2)
		WHERE replica = $1 AND conversation_id = ANY($3) RETURNING conversation_id`
	releaseSQL = `DELETE FROM agentry_leases WHERE replica = $1 AND conversation_id = ANY($2)`
)

// Leases returns the store's ownership leases for this replica, creating
// their table when it is missing. Only a store several processes share
// has them (PostgreSQL); a SQLite store is one process's, which needs
// none (leave host.Options.Leases nil).
func (s *Store) Leases(ctx context.Context, o LeaseOptions) (*Leases, error) {
	if s.d.Kind != "postgres" {
		return nil, fmt.Errorf("sqlstore: a %s store is one process's and needs no leases; leave host.Options.Leases nil, or share a postgres store between replicas", s.d.Kind)
	}
	if _, err := host.ParseReplicaURL(o.Replica.Address); err != nil {
		return nil, err
	}
	if o.TTL < 0 {
		return nil, errors.New("sqlstore: the lease duration must not be negative; use 0 for the default")
	}
	if o.TTL == 0 {
		o.TTL = host.DefaultLeaseTTL
	}
	if o.TTL < 300*time.Millisecond {
		return nil, fmt.Errorf("sqlstore: a lease of %s is too short to be renewed in time; use at least 300ms", o.TTL)
	}
	if o.Replica.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Replica.ID = "rep-" + hex.EncodeToString(b[:])
	}
	if err := s.createLeases(ctx); err != nil {
		return nil, err
	}
	return &Leases{s: s, self: o.Replica, ttl: o.TTL, secs: o.TTL.Seconds()}, nil
}

func (s *Store) createLeases(ctx context.Context) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("creating the lease table", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if s.d.Lock != nil {
		// Replicas starting together would race on CREATE … IF NOT EXISTS.
		if err := s.d.Lock(ctx, tx); err != nil {
			return s.fail("creating the lease table", err)
		}
	}
	for _, q := range leaseSchema {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return s.fail("creating the lease table", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail("creating the lease table", err)
	}
	return nil
}

// Replica is this process.
func (l *Leases) Replica() host.Replica { return l.self }

// TTL is how long a lease lasts unrenewed.
func (l *Leases) TTL() time.Duration { return l.ttl }

// Claim takes or renews the lease of the owner's open conversation id.
func (l *Leases) Claim(ctx context.Context, owner tool.Identity, id string) (host.Claim, error) {
	var c host.Claim
	err := l.s.write.QueryRowContext(ctx, claimSQL, id, owner.Tenant, owner.Principal, l.self.ID, l.self.Address, l.secs).Scan(&c.Epoch, &c.TakenFrom)
	switch {
	case err == nil:
		c.Held = true
		return c, nil
	case !errors.Is(err, sql.ErrNoRows):
		return host.Claim{}, l.s.fail("claiming a session lease", err)
	}
	// Not taken: another replica holds a live lease, or there is nothing
	// to hold (no such open conversation of this owner).
	h, err := l.Holder(ctx, id)
	if err != nil {
		return host.Claim{}, err
	}
	return host.Claim{Holder: h}, nil
}

// Holder returns the replica holding a live lease on id, if one does.
func (l *Leases) Holder(ctx context.Context, id string) (host.Holder, error) {
	var h host.Holder
	var left float64
	err := l.s.read.QueryRowContext(ctx, holderSQL, id).Scan(&h.ID, &h.Address, &left)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return host.Holder{}, nil
	case err != nil:
		return host.Holder{}, l.s.fail("looking up a session lease", err)
	}
	h.Left = time.Duration(left * float64(time.Second))
	return h, nil
}

// Renew extends this replica's leases of ids and returns those it still
// holds.
func (l *Leases) Renew(ctx context.Context, ids []string) ([]string, error) {
	rows, err := l.s.write.QueryContext(ctx, renewSQL, l.self.ID, l.secs, ids)
	if err != nil {
		return nil, l.s.fail("renewing session leases", err)
	}
	defer rows.Close()
	kept := make([]string, 0, len(ids))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, l.s.fail("renewing session leases", err)
		}
		kept = append(kept, id)
	}
	if err := rows.Err(); err != nil {
		return nil, l.s.fail("renewing session leases", err)
	}
	return kept, nil
}

// Release gives up this replica's leases of ids.
func (l *Leases) Release(ctx context.Context, ids []string) error {
	if _, err := l.s.write.ExecContext(ctx, releaseSQL, l.self.ID, ids); err != nil {
		return l.s.fail("releasing session leases", err)
	}
	return nil
}
