package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/agentry-dev/agentry/agent"
)

// OpenStore opens the conversation store a DSN names:
//
//   - postgres://… or postgresql://… — PostgreSQL (github.com/jackc/pgx/v5),
//     for several replicas sharing conversations;
//   - anything else is a file path for SQLite (modernc.org/sqlite, pure Go,
//     WAL mode), created when missing. "sqlite:" in front is allowed.
//
// A SQLite path may end in "?sync=full" to fsync every commit (survives a
// power loss; the default, sync=normal, survives a crash of the process and
// is about 4× faster here). The schema is created when missing; a schema
// newer than this build is refused.
func OpenStore(ctx context.Context, dsn string) (Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn)
	case dsn == "":
		return nil, errors.New("host: the store DSN is empty; pass a SQLite file path (agentry.db) or a postgres:// URL")
	}
	return openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
}

// schemaVersion is the version of the tables below.
const schemaVersion = 1

var schema = []string{
	`CREATE TABLE IF NOT EXISTS agentry_meta (
		key   TEXT PRIMARY KEY,
		value TEXT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS agentry_conversations (
		id               TEXT PRIMARY KEY,
		tenant           TEXT NOT NULL,
		principal        TEXT NOT NULL,
		state            TEXT NOT NULL,
		turns            INTEGER NOT NULL,
		transcript       TEXT,
		pending_question TEXT,
		pending_tool     TEXT,
		checkpoint       TEXT,
		last_run_id      TEXT NOT NULL,
		created_us       BIGINT NOT NULL,
		updated_us       BIGINT NOT NULL,
		version          BIGINT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS agentry_conversations_owner
		ON agentry_conversations (tenant, principal, state, updated_us)`,
	`CREATE TABLE IF NOT EXISTS agentry_turns (
		conversation_id TEXT NOT NULL REFERENCES agentry_conversations (id),
		seq             BIGINT NOT NULL,
		run_id          TEXT NOT NULL,
		kind            TEXT NOT NULL,
		outcome         TEXT NOT NULL,
		error           TEXT NOT NULL,
		started_us      BIGINT NOT NULL,
		ended_us        BIGINT NOT NULL,
		PRIMARY KEY (conversation_id, seq)
	)`,
}

// sqlStore is the Store on database/sql, for SQLite and PostgreSQL. The
// SQL is written once with ? placeholders; rebind rewrites it for
// PostgreSQL.
type sqlStore struct {
	kind   string  // "sqlite" or "postgres", for error messages
	write  *sql.DB // SQLite: one connection, so writers queue here, not on SQLITE_BUSY
	read   *sql.DB // may be the same as write
	rebind func(string) string
	q      queries

	closeOnce sync.Once
	closeErr  error
}

type queries struct {
	create, load, loadCP, save, exists, insertTurn, list, listOpen, countOpen, turns string
}

func openSQLite(ctx context.Context, path string) (*sqlStore, error) {
	path, params, _ := strings.Cut(path, "?")
	if path == "" {
		return nil, errors.New("host: the SQLite store path is empty; pass a file path such as agentry.db")
	}
	syncMode := "NORMAL"
	for _, kv := range strings.Split(params, "&") {
		switch strings.ToLower(kv) {
		case "":
		case "sync=full":
			syncMode = "FULL"
		case "sync=normal":
			syncMode = "NORMAL"
		default:
			return nil, fmt.Errorf("host: unknown SQLite store option %q; the one option is sync=full or sync=normal", kv)
		}
	}
	if strings.ContainsAny(path, "#") {
		return nil, errors.New("host: the SQLite store path contains '#'; choose a file name without it")
	}
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + syncMode + ")&_pragma=foreign_keys(1)&_txlock=immediate"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("host: opening the SQLite store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("host: opening the SQLite store: %w", err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	s := &sqlStore{kind: "sqlite", write: w, read: r, rebind: func(q string) string { return q }}
	if err := s.migrate(ctx, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func openPostgres(ctx context.Context, dsn string) (*sqlStore, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("host: opening the PostgreSQL store: %w", redactDSN(err, dsn))
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	s := &sqlStore{kind: "postgres", write: db, read: db, rebind: dollarParams}
	// Replicas starting together must not race to create the tables.
	lock := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7311942088)`)
		return err
	}
	if err := s.migrate(ctx, lock); err != nil {
		_ = s.Close()
		return nil, redactDSN(err, dsn)
	}
	return s, nil
}

// redactDSN keeps a password in the DSN out of an error message.
func redactDSN(err error, dsn string) error {
	msg := err.Error()
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			if cred := dsn[i+3 : at]; strings.Contains(cred, ":") {
				_, pw, _ := strings.Cut(cred, ":")
				if pw != "" && strings.Contains(msg, pw) {
					return errors.New(strings.ReplaceAll(msg, pw, "xxxxx"))
				}
			}
		}
	}
	return err
}

// dollarParams rewrites ? placeholders as $1, $2, … (none of our SQL has
// a ? inside a string literal).
func dollarParams(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *sqlStore) migrate(ctx context.Context, lock func(context.Context, *sql.Tx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("host: the %s store cannot be reached: %w", s.kind, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := lock(ctx, tx); err != nil {
		return fmt.Errorf("host: locking the %s store for its schema: %w", s.kind, err)
	}
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("host: creating the %s store's tables: %w", s.kind, err)
		}
	}
	var v string
	err = tx.QueryRowContext(ctx, s.rebind(`SELECT value FROM agentry_meta WHERE key = ?`), "schema").Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO agentry_meta (key, value) VALUES (?, ?)`), "schema", strconv.Itoa(schemaVersion)); err != nil {
			return fmt.Errorf("host: recording the %s store's schema version: %w", s.kind, err)
		}
	case err != nil:
		return fmt.Errorf("host: reading the %s store's schema version: %w", s.kind, err)
	default:
		if n, _ := strconv.Atoi(v); n > schemaVersion {
			return fmt.Errorf("host: the %s store has schema version %s and this build reads version %d; run the agentry release that wrote it", s.kind, v, schemaVersion)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("host: creating the %s store's tables: %w", s.kind, err)
	}
	const cols = `id, tenant, principal, state, turns, transcript, pending_question, pending_tool, last_run_id, created_us, updated_us, version`
	s.q = queries{
		create: s.rebind(`INSERT INTO agentry_conversations (` + cols + `, checkpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)`),
		load:   s.rebind(`SELECT ` + cols + ` FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		loadCP: s.rebind(`SELECT checkpoint FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		save: s.rebind(`UPDATE agentry_conversations SET state = ?, turns = ?, transcript = ?, pending_question = ?, pending_tool = ?,
			checkpoint = ?, last_run_id = ?, updated_us = ?, version = ?
			WHERE id = ? AND tenant = ? AND principal = ? AND version = ?`),
		exists: s.rebind(`SELECT 1 FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		insertTurn: s.rebind(`INSERT INTO agentry_turns (conversation_id, seq, run_id, kind, outcome, error, started_us, ended_us)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		list: s.rebind(`SELECT id, tenant, principal, state, turns, NULL, pending_question, pending_tool, last_run_id, created_us, updated_us, version
			FROM agentry_conversations WHERE tenant = ? AND principal = ? ORDER BY updated_us DESC, id LIMIT ?`),
		listOpen: s.rebind(`SELECT id, tenant, principal, state, turns, NULL, pending_question, pending_tool, last_run_id, created_us, updated_us, version
			FROM agentry_conversations WHERE tenant = ? AND principal = ? AND state <> 'closed' ORDER BY updated_us DESC, id LIMIT ?`),
		countOpen: s.rebind(`SELECT COUNT(*) FROM agentry_conversations WHERE tenant = ? AND principal = ? AND state <> 'closed'`),
		turns: s.rebind(`SELECT t.seq, t.run_id, t.kind, t.outcome, t.error, t.started_us, t.ended_us
			FROM agentry_turns t JOIN agentry_conversations c ON c.id = t.conversation_id
			WHERE c.id = ? AND c.tenant = ? AND c.principal = ? ORDER BY t.seq`),
	}
	return nil
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func (s *sqlStore) Create(ctx context.Context, c Conversation) error {
	if err := checkConversation(c); err != nil {
		return err
	}
	tr, err := marshalTranscript(c.Transcript)
	if err != nil {
		return err
	}
	var pq, pt sql.NullString
	if c.Pending != nil {
		pq, pt = sql.NullString{String: c.Pending.Question, Valid: true}, sql.NullString{String: c.Pending.Tool, Valid: true}
	}
	_, err = s.write.ExecContext(ctx, s.q.create, c.ID, c.Owner.Tenant, c.Owner.Principal, string(c.State), c.Turns, tr,
		pq, pt, c.LastRunID, micros(c.CreatedAt), micros(c.UpdatedAt), c.Version)
	if err != nil {
		if isUniqueViolation(err) {
			return ErrExists
		}
		return s.fail("creating a conversation", err)
	}
	return nil
}

func checkConversation(c Conversation) error {
	switch {
	case c.ID == "":
		return errors.New("host: the conversation has no id")
	case c.Owner.Tenant == "" || c.Owner.Principal == "":
		return errors.New("host: the conversation has no owner; a conversation belongs to a tenant and a principal")
	case c.State != StateOpen && c.State != StatePaused && c.State != StateClosed:
		return fmt.Errorf("host: unknown conversation state %q", c.State)
	case (c.State == StatePaused) != (c.Pending != nil):
		return errors.New("host: a conversation has a pending question exactly when it is paused")
	}
	return nil
}

func isUniqueViolation(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "UNIQUE constraint failed") || strings.Contains(msg, "SQLSTATE 23505")
}

func (s *sqlStore) fail(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("host: %s in the %s store: %w", what, s.kind, err)
	}
	return &StoreError{Op: what, Kind: s.kind, Err: err}
}

// StoreError is a failure of the store itself (not a missing or changed
// conversation).
type StoreError struct {
	Op, Kind string
	Err      error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("host: %s in the %s store failed: %v", e.Op, e.Kind, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

func marshalTranscript(c *agent.Conversation) (sql.NullString, error) {
	if c == nil {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("host: encoding the transcript: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

type scanner interface{ Scan(...any) error }

func scanConversation(row scanner) (Conversation, error) {
	var (
		c                 Conversation
		state, lastRun    string
		tr, pq, pt        sql.NullString
		created, updated  int64
		tenant, principal string
	)
	if err := row.Scan(&c.ID, &tenant, &principal, &state, &c.Turns, &tr, &pq, &pt, &lastRun, &created, &updated, &c.Version); err != nil {
		return Conversation{}, err
	}
	c.Owner = Owner{Tenant: tenant, Principal: principal}
	c.State = State(state)
	c.LastRunID = lastRun
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	if pq.Valid {
		c.Pending = &Pending{Question: pq.String, Tool: pt.String}
	}
	if tr.Valid {
		var conv agent.Conversation
		if err := json.Unmarshal([]byte(tr.String), &conv); err != nil {
			return Conversation{}, fmt.Errorf("host: the stored transcript of %s is not JSON: %w", c.ID, err)
		}
		c.Transcript = &conv
	}
	return c, nil
}

func (s *sqlStore) Load(ctx context.Context, owner Owner, id string) (Conversation, error) {
	c, err := scanConversation(s.read.QueryRowContext(ctx, s.q.load, id, owner.Tenant, owner.Principal))
	if errors.Is(err, sql.ErrNoRows) {
		return Conversation{}, ErrNotFound
	}
	if err != nil {
		return Conversation{}, s.fail("loading a conversation", err)
	}
	return c, nil
}

func (s *sqlStore) LoadCheckpoint(ctx context.Context, owner Owner, id string) ([]byte, error) {
	var cp sql.NullString
	err := s.read.QueryRowContext(ctx, s.q.loadCP, id, owner.Tenant, owner.Principal).Scan(&cp)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !cp.Valid) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, s.fail("loading a checkpoint", err)
	}
	return []byte(cp.String), nil
}

func (s *sqlStore) Save(ctx context.Context, u Update) (int64, error) {
	c := u.Conversation
	if err := checkConversation(c); err != nil {
		return 0, err
	}
	if (c.State == StatePaused) != (u.Checkpoint != nil) {
		return 0, errors.New("host: a paused conversation is saved with its checkpoint, and only a paused one")
	}
	tr, err := marshalTranscript(c.Transcript)
	if err != nil {
		return 0, err
	}
	var pq, pt, cp sql.NullString
	if c.Pending != nil {
		pq, pt = sql.NullString{String: c.Pending.Question, Valid: true}, sql.NullString{String: c.Pending.Tool, Valid: true}
	}
	if u.Checkpoint != nil {
		cp = sql.NullString{String: string(u.Checkpoint), Valid: true}
	}
	next := c.Version + 1
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, s.q.save, string(c.State), c.Turns, tr, pq, pt, cp, c.LastRunID, micros(c.UpdatedAt), next,
		c.ID, c.Owner.Tenant, c.Owner.Principal, c.Version)
	if err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	if n == 0 {
		var one int
		err := tx.QueryRowContext(ctx, s.q.exists,
			c.ID, c.Owner.Tenant, c.Owner.Principal).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, ErrNotFound
		}
		return 0, ErrConflict
	}
	if t := u.Turn; t != nil {
		if _, err := tx.ExecContext(ctx, s.q.insertTurn, c.ID, next, t.RunID, t.Kind, t.Outcome, t.Error, micros(t.Started), micros(t.Ended)); err != nil {
			return 0, s.fail("recording a turn", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	return next, nil
}

func (s *sqlStore) List(ctx context.Context, owner Owner, opt ListOptions) ([]Conversation, error) {
	limit := opt.Limit
	if limit <= 0 || limit > maxList {
		limit = maxList
	}
	q := s.q.list
	if opt.OpenOnly {
		q = s.q.listOpen
	}
	rows, err := s.read.QueryContext(ctx, q, owner.Tenant, owner.Principal, limit)
	if err != nil {
		return nil, s.fail("listing conversations", err)
	}
	defer rows.Close()
	var out []Conversation
	for rows.Next() {
		c, err := scanConversation(rows)
		if err != nil {
			return nil, s.fail("listing conversations", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing conversations", err)
	}
	return out, nil
}

func (s *sqlStore) CountOpen(ctx context.Context, owner Owner) (int, error) {
	var n int
	if err := s.read.QueryRowContext(ctx, s.q.countOpen, owner.Tenant, owner.Principal).Scan(&n); err != nil {
		return 0, s.fail("counting conversations", err)
	}
	return n, nil
}

func (s *sqlStore) Turns(ctx context.Context, owner Owner, id string) ([]Turn, error) {
	if _, err := s.Load(ctx, owner, id); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, s.q.turns, id, owner.Tenant, owner.Principal)
	if err != nil {
		return nil, s.fail("reading the turn log", err)
	}
	defer rows.Close()
	var out []Turn
	for rows.Next() {
		var t Turn
		var started, ended int64
		if err := rows.Scan(&t.Seq, &t.RunID, &t.Kind, &t.Outcome, &t.Error, &started, &ended); err != nil {
			return nil, s.fail("reading the turn log", err)
		}
		t.Started, t.Ended = fromMicros(started), fromMicros(ended)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading the turn log", err)
	}
	return out, nil
}

func (s *sqlStore) Ping(ctx context.Context) error {
	if err := s.read.PingContext(ctx); err != nil {
		return s.fail("reaching the store", err)
	}
	var one int
	if err := s.read.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return s.fail("reaching the store", err)
	}
	return nil
}

func (s *sqlStore) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.read != s.write {
			errs = append(errs, s.read.Close())
		}
		errs = append(errs, s.write.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
