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
	"github.com/agentry-dev/agentry/llm"
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
		transcript_head  TEXT,
		messages         BIGINT NOT NULL,
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
	`CREATE TABLE IF NOT EXISTS agentry_messages (
		conversation_id TEXT NOT NULL REFERENCES agentry_conversations (id),
		idx             BIGINT NOT NULL,
		message         TEXT NOT NULL,
		PRIMARY KEY (conversation_id, idx)
	)`,
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
	stmt   struct{ save, head, insertTurn, insertMsg *sql.Stmt }

	// SQLite only: saves go through one writer goroutine (group commit).
	saves      chan *saveReq
	stopped    chan struct{}
	writerDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

type queries struct {
	create, load, loadCP, save, exists, insertTurn, list, listOpen, countOpen, turns string
	messages, head, insertMsg                                                        string
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
	s.saves = make(chan *saveReq)
	s.stopped = make(chan struct{})
	s.writerDone = make(chan struct{})
	go s.groupCommit()
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
	const cols = `id, tenant, principal, state, turns, transcript_head, messages, pending_question, pending_tool, last_run_id, created_us, updated_us, version`
	s.q = queries{
		create:    s.rebind(`INSERT INTO agentry_conversations (` + cols + `, checkpoint) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, NULL)`),
		messages:  s.rebind(`SELECT message FROM agentry_messages WHERE conversation_id = ? ORDER BY idx`),
		head:      s.rebind(`SELECT version, messages FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		insertMsg: s.rebind(`INSERT INTO agentry_messages (conversation_id, idx, message) VALUES (?, ?, ?)`),
		load:      s.rebind(`SELECT ` + cols + ` FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		loadCP:    s.rebind(`SELECT checkpoint FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		save: s.rebind(`UPDATE agentry_conversations SET state = ?, turns = ?, transcript_head = COALESCE(?, transcript_head), messages = ?,
			pending_question = ?, pending_tool = ?, checkpoint = ?, last_run_id = ?, updated_us = ?, version = ?
			WHERE id = ? AND tenant = ? AND principal = ? AND version = ?`),
		exists: s.rebind(`SELECT 1 FROM agentry_conversations WHERE id = ? AND tenant = ? AND principal = ?`),
		insertTurn: s.rebind(`INSERT INTO agentry_turns (conversation_id, seq, run_id, kind, outcome, error, started_us, ended_us)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		list: s.rebind(`SELECT id, tenant, principal, state, turns, NULL, messages, pending_question, pending_tool, last_run_id, created_us, updated_us, version
			FROM agentry_conversations WHERE tenant = ? AND principal = ? ORDER BY updated_us DESC, id LIMIT ?`),
		listOpen: s.rebind(`SELECT id, tenant, principal, state, turns, NULL, messages, pending_question, pending_tool, last_run_id, created_us, updated_us, version
			FROM agentry_conversations WHERE tenant = ? AND principal = ? AND state <> 'closed' ORDER BY updated_us DESC, id LIMIT ?`),
		countOpen: s.rebind(`SELECT COUNT(*) FROM agentry_conversations WHERE tenant = ? AND principal = ? AND state <> 'closed'`),
		turns: s.rebind(`SELECT t.seq, t.run_id, t.kind, t.outcome, t.error, t.started_us, t.ended_us
			FROM agentry_turns t JOIN agentry_conversations c ON c.id = t.conversation_id
			WHERE c.id = ? AND c.tenant = ? AND c.principal = ? ORDER BY t.seq`),
	}
	for _, p := range []struct {
		to **sql.Stmt
		q  string
	}{{&s.stmt.save, s.q.save}, {&s.stmt.head, s.q.head}, {&s.stmt.insertTurn, s.q.insertTurn}, {&s.stmt.insertMsg, s.q.insertMsg}} {
		st, err := s.write.PrepareContext(ctx, p.q)
		if err != nil {
			return fmt.Errorf("host: preparing the %s store's statements: %w", s.kind, err)
		}
		*p.to = st
	}
	return nil
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func (s *sqlStore) Create(ctx context.Context, c Conversation) error {
	if err := checkConversation(c); err != nil {
		return err
	}
	if c.Transcript != nil && len(c.Transcript.Messages) > 0 {
		return errors.New("host: a conversation is created without messages; Save adds them")
	}
	head, err := transcriptHead(c.Transcript)
	if err != nil {
		return err
	}
	var pq, pt sql.NullString
	if c.Pending != nil {
		pq, pt = sql.NullString{String: c.Pending.Question, Valid: true}, sql.NullString{String: c.Pending.Tool, Valid: true}
	}
	_, err = s.write.ExecContext(ctx, s.q.create, c.ID, c.Owner.Tenant, c.Owner.Principal, string(c.State), c.Turns, head,
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

// transcriptHead is the transcript without its messages (version and
// identity); the messages are rows of their own, appended as they come.
func transcriptHead(c *agent.Conversation) (sql.NullString, error) {
	if c == nil {
		return sql.NullString{}, nil
	}
	h := *c
	h.Messages = nil
	b, err := json.Marshal(h)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("host: encoding the transcript: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

type scanner interface{ Scan(...any) error }

// scanConversation reads a row; n is the number of stored messages.
func scanConversation(row scanner) (c Conversation, n int64, err error) {
	var (
		state, lastRun    string
		head, pq, pt      sql.NullString
		created, updated  int64
		tenant, principal string
	)
	if err := row.Scan(&c.ID, &tenant, &principal, &state, &c.Turns, &head, &n, &pq, &pt, &lastRun, &created, &updated, &c.Version); err != nil {
		return Conversation{}, 0, err
	}
	c.Owner = Owner{Tenant: tenant, Principal: principal}
	c.State = State(state)
	c.LastRunID = lastRun
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	if pq.Valid {
		c.Pending = &Pending{Question: pq.String, Tool: pt.String}
	}
	if head.Valid {
		var conv agent.Conversation
		if err := json.Unmarshal([]byte(head.String), &conv); err != nil {
			return Conversation{}, 0, fmt.Errorf("host: the stored transcript of %s is not JSON: %w", c.ID, err)
		}
		c.Transcript = &conv
	}
	return c, n, nil
}

func (s *sqlStore) Load(ctx context.Context, owner Owner, id string) (Conversation, error) {
	c, n, err := s.info(ctx, owner, id)
	if err != nil || n == 0 {
		return c, err
	}
	rows, err := s.read.QueryContext(ctx, s.q.messages, id)
	if err != nil {
		return Conversation{}, s.fail("loading a transcript", err)
	}
	defer rows.Close()
	msgs := make([]llm.Message, 0, n)
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return Conversation{}, s.fail("loading a transcript", err)
		}
		var m llm.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return Conversation{}, fmt.Errorf("host: a stored message of %s is not JSON: %w", id, err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return Conversation{}, s.fail("loading a transcript", err)
	}
	if int64(len(msgs)) != n {
		return Conversation{}, s.fail("loading a transcript", fmt.Errorf("%d messages stored, %d recorded", len(msgs), n))
	}
	if c.Transcript == nil {
		c.Transcript = &agent.Conversation{Version: agent.ConversationVersion}
	}
	c.Transcript.Messages = msgs
	return c, nil
}

// Info is Load without the transcript's messages.
func (s *sqlStore) Info(ctx context.Context, owner Owner, id string) (Conversation, error) {
	c, _, err := s.info(ctx, owner, id)
	if c.Transcript != nil {
		c.Transcript = nil
	}
	return c, err
}

func (s *sqlStore) info(ctx context.Context, owner Owner, id string) (Conversation, int64, error) {
	c, n, err := scanConversation(s.read.QueryRowContext(ctx, s.q.load, id, owner.Tenant, owner.Principal))
	if errors.Is(err, sql.ErrNoRows) {
		return Conversation{}, 0, ErrNotFound
	}
	if err != nil {
		return Conversation{}, 0, s.fail("loading a conversation", err)
	}
	return c, n, nil
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

// saveReq is one Save, ready to write.
type saveReq struct {
	ctx              context.Context
	c                Conversation
	head, pq, pt, cp sql.NullString
	turn             *Turn
	done             chan saveRes // buffered: the writer never waits on it
}

type saveRes struct {
	version int64
	err     error
}

func (s *sqlStore) Save(ctx context.Context, u Update) (int64, error) {
	c := u.Conversation
	if err := checkConversation(c); err != nil {
		return 0, err
	}
	if (c.State == StatePaused) != (u.Checkpoint != nil) {
		return 0, errors.New("host: a paused conversation is saved with its checkpoint, and only a paused one")
	}
	head, err := transcriptHead(c.Transcript)
	if err != nil {
		return 0, err
	}
	r := &saveReq{ctx: ctx, c: c, head: head, turn: u.Turn}
	if c.Pending != nil {
		r.pq, r.pt = sql.NullString{String: c.Pending.Question, Valid: true}, sql.NullString{String: c.Pending.Tool, Valid: true}
	}
	if u.Checkpoint != nil {
		r.cp = sql.NullString{String: string(u.Checkpoint), Valid: true}
	}
	if s.saves == nil {
		return s.saveAlone(ctx, r)
	}
	r.done = make(chan saveRes, 1)
	select {
	case s.saves <- r:
	case <-s.stopped:
		return 0, s.fail("saving a conversation", errors.New("the store is closed"))
	case <-ctx.Done():
		return 0, s.fail("saving a conversation", ctx.Err())
	}
	res := <-r.done
	return res.version, res.err
}

// saveAlone writes one save in a transaction of its own.
func (s *sqlStore) saveAlone(ctx context.Context, r *saveReq) (int64, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	v, err := s.saveIn(ctx, tx, r)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	return v, nil
}

// saveIn writes r inside tx. ErrConflict and ErrNotFound leave tx usable
// (nothing was written); any other error means tx must be rolled back.
func (s *sqlStore) saveIn(ctx context.Context, tx *sql.Tx, r *saveReq) (int64, error) {
	c := r.c
	var version, stored int64
	err := tx.StmtContext(ctx, s.stmt.head).QueryRowContext(ctx, c.ID, c.Owner.Tenant, c.Owner.Principal).Scan(&version, &stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, ErrNotFound
	case err != nil:
		return 0, s.fail("saving a conversation", err)
	case version != c.Version:
		return 0, ErrConflict
	}
	// The transcript only grows: the store appends the messages it lacks.
	// A nil transcript leaves the stored one as it is.
	count := stored
	var msgs []llm.Message
	if c.Transcript != nil {
		msgs = c.Transcript.Messages
		if int64(len(msgs)) < stored {
			return 0, ErrConflict
		}
		count = int64(len(msgs))
	}
	// The version check in the UPDATE is what decides between concurrent
	// writers (PostgreSQL re-checks it once the row lock is theirs); only
	// then are messages appended, so a loser has written nothing.
	next := c.Version + 1
	res, err := tx.StmtContext(ctx, s.stmt.save).ExecContext(ctx, string(c.State), c.Turns, r.head, count, r.pq, r.pt, r.cp, c.LastRunID, micros(c.UpdatedAt), next,
		c.ID, c.Owner.Tenant, c.Owner.Principal, c.Version)
	if err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, s.fail("saving a conversation", err)
	} else if n == 0 {
		return 0, ErrConflict
	}
	for i := stored; i < count; i++ {
		b, err := json.Marshal(msgs[i])
		if err != nil {
			return 0, fmt.Errorf("host: encoding a message: %w", err)
		}
		if _, err := tx.StmtContext(ctx, s.stmt.insertMsg).ExecContext(ctx, c.ID, i, string(b)); err != nil {
			return 0, s.fail("appending to a transcript", err)
		}
	}
	if t := r.turn; t != nil {
		if _, err := tx.StmtContext(ctx, s.stmt.insertTurn).ExecContext(ctx, c.ID, next, t.RunID, t.Kind, t.Outcome, t.Error, micros(t.Started), micros(t.Ended)); err != nil {
			return 0, s.fail("recording a turn", err)
		}
	}
	return next, nil
}

// maxBatch bounds the saves one group commit writes.
const maxBatch = 128

// groupCommit is SQLite's single writer: it takes the saves waiting at
// that moment and writes them in one transaction, so concurrent turns
// share one commit instead of queueing for one each. Each save still
// stands alone: a conflict refuses only that save; a failure of the
// batch retries every save in a transaction of its own.
func (s *sqlStore) groupCommit() {
	defer close(s.writerDone)
	for {
		var first *saveReq
		select {
		case first = <-s.saves:
		case <-s.stopped:
			return
		}
		batch := []*saveReq{first}
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-s.saves:
				batch = append(batch, r)
			default:
				break more
			}
		}
		s.commitBatch(batch)
	}
}

func (s *sqlStore) commitBatch(batch []*saveReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- saveRes{err: s.fail("saving a conversation", err)}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		v, err := s.saveAlone(context.WithoutCancel(live[0].ctx), live[0])
		live[0].done <- saveRes{version: v, err: err}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make([]saveRes, len(live))
	ok := func() bool {
		tx, err := s.write.BeginTx(ctx, nil)
		if err != nil {
			return false
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		for i, r := range live {
			v, err := s.saveIn(ctx, tx, r)
			if err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
				return false
			}
			results[i] = saveRes{version: v, err: err}
		}
		return tx.Commit() == nil
	}()
	if !ok {
		// Find out which save was at fault: each on its own.
		for i, r := range live {
			v, err := s.saveAlone(ctx, r)
			results[i] = saveRes{version: v, err: err}
		}
	}
	for i, r := range live {
		r.done <- results[i]
	}
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
		c, _, err := scanConversation(rows)
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
	if _, _, err := s.info(ctx, owner, id); err != nil {
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
		if s.stopped != nil {
			close(s.stopped)
			<-s.writerDone
		}
		var errs []error
		for _, st := range []*sql.Stmt{s.stmt.save, s.stmt.head, s.stmt.insertTurn, s.stmt.insertMsg} {
			if st != nil {
				errs = append(errs, st.Close())
			}
		}
		if s.read != s.write {
			errs = append(errs, s.read.Close())
		}
		errs = append(errs, s.write.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
