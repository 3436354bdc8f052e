// Package sqlstore is the host's conversation store on database/sql: the
// schema, its migrations, optimistic concurrency and (for SQLite) group
// commit, written once for every SQL database. It links no driver: the
// packages sqlstore/sqlite (modernc.org/sqlite, pure Go) and
// sqlstore/postgres (github.com/jackc/pgx/v5) open a database and hand it
// here, so a program links only the driver it uses, and importing host
// links none.
//
// A Store is a host.Store, and also host.Records: the port through which
// a provider keeps its own record of each conversation (provider/native's
// HostStore keeps the agent's transcripts there), in the same database,
// so a restarted `agentry serve` resumes every conversation from its
// stored binding, and a turn's two writes share one transaction. It knows
// no provider: a record is a head, entries and turn marks to it.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// SchemaVersion is the version of the tables this build writes.
const SchemaVersion = 11

// Dialect is what differs between databases.
type Dialect struct {
	// Kind names the database in errors ("sqlite", "postgres").
	Kind string
	// Rebind rewrites the package's ? placeholders (nil: none needed).
	Rebind func(string) string
	// Lock serialises schema changes between processes starting together
	// (nil: the database does it, as SQLite's immediate transactions do).
	Lock func(context.Context, *sql.Tx) error
	// GroupCommit sends every save through one writer goroutine that
	// commits the saves waiting together in one transaction (SQLite: one
	// writer at a time anyway).
	GroupCommit bool
	// UniqueViolation reports whether err is a unique-key violation.
	UniqueViolation func(error) bool
}

// Store is the host's store on one SQL database.
type Store struct {
	d      Dialect
	write  *sql.DB // SQLite: one connection, so writers queue here, not on SQLITE_BUSY
	read   *sql.DB // may be the same as write
	rebind func(string) string
	q      queries
	stmt   struct {
		save, head, insertTurn, insertMsg  *sql.Stmt
		insertMsgs, recordAdds, fence      *sql.Stmt
		recordCount, recordSave, recordAdd *sql.Stmt
		recordAddMark                      *sql.Stmt
	}

	saves      chan *saveReq
	stopped    chan struct{}
	writerDone chan struct{}

	// rstored is how many entries and marks each provider record has in
	// the tables, as this process last committed them. Only the single
	// writer (SQLite) keeps it: no other process writes there.
	rmu     sync.Mutex
	rstored map[string]recordCount

	closeOnce sync.Once
	closeErr  error
}

var _ host.Store = (*Store)(nil)

type queries struct {
	create, load, save, countOpen, turns, appendTurn, lockRow, insertTurn          string
	messages, head, insertMsg, insertMsgs, recordLoad, recordSave, recordAdds      string
	recordEntries, recordMarks, recordCount, recordAdd, recordAddMark, recordClear string
	recordClearMarks, recordMarked, fence, begin, beginForward, void, fenceState   string
	tenantInfo                                                                     string // a tenant's admins' read
	usageTotal, usageTotalOne                                                      string
}

// v1 is the first schema; migrations take it to SchemaVersion. A new
// database runs the same steps, so old and new databases never differ.
var v1 = []string{
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

// v2 puts conversations on the provider contract: each names its
// provider and binding; a paused one names the request it waits on; the
// native provider's conversations get a table of their own.
var v2 = []string{
	`ALTER TABLE agentry_conversations ADD COLUMN provider TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE agentry_conversations ADD COLUMN binding TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE agentry_conversations ADD COLUMN pending_request TEXT`,
	`ALTER TABLE agentry_conversations ADD COLUMN turn_seq BIGINT NOT NULL DEFAULT 0`,
	`UPDATE agentry_conversations SET turn_seq = COALESCE((SELECT MAX(seq) FROM agentry_turns t WHERE t.conversation_id = agentry_conversations.id), 0)`,
	`CREATE TABLE IF NOT EXISTS agentry_native (
		binding    TEXT PRIMARY KEY,
		head       TEXT NOT NULL,
		messages   BIGINT NOT NULL,
		updated_us BIGINT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS agentry_native_messages (
		binding TEXT NOT NULL REFERENCES agentry_native (binding),
		idx     BIGINT NOT NULL,
		message TEXT NOT NULL,
		PRIMARY KEY (binding, idx)
	)`,
}

// v3 moves a native record's turn marks out of its head into rows of
// their own, appended like its messages: a turn then writes the same few
// rows however long the conversation is, rather than a head that grows
// with every turn.
var v3 = []string{
	`ALTER TABLE agentry_native ADD COLUMN turns BIGINT NOT NULL DEFAULT 0`,
	`CREATE TABLE IF NOT EXISTS agentry_native_turns (
		binding  TEXT NOT NULL REFERENCES agentry_native (binding),
		idx      BIGINT NOT NULL,
		turn_id  TEXT NOT NULL,
		messages BIGINT NOT NULL,
		PRIMARY KEY (binding, idx)
	)`,
}

// v4 fences the conversations: each keeps the newest lease epoch that
// wrote it (a write under an older one is refused), the turn a replica
// began and has not saved the end of (so whoever takes the conversation
// over learns a turn was lost), and a short log of the forwarded requests
// that began or were given up by their forwarder.
var v4 = []string{
	`ALTER TABLE agentry_conversations ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0`,
	`ALTER TABLE agentry_conversations ADD COLUMN turn_begun TEXT`,
	`ALTER TABLE agentry_conversations ADD COLUMN forwards TEXT NOT NULL DEFAULT ''`,
}

// v6 names the agent profile each conversation was opened with, and the
// model its person chose, so a restarted host or another replica serves
// it with the same ones. Conversations from before keep ” (the host's
// default agent, the agent's own default model).
var v6 = []string{
	`ALTER TABLE agentry_conversations ADD COLUMN agent TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE agentry_conversations ADD COLUMN model TEXT NOT NULL DEFAULT ''`,
}

// New puts a Store on an open database: it creates or migrates the
// schema (refusing one newer than this build) and prepares its
// statements. write and read may be the same; the Store closes both.
func New(ctx context.Context, write, read *sql.DB, d Dialect) (*Store, error) {
	if d.Rebind == nil {
		d.Rebind = func(q string) string { return q }
	}
	if d.UniqueViolation == nil {
		d.UniqueViolation = func(error) bool { return false }
	}
	s := &Store{d: d, write: write, read: read, rebind: d.Rebind, rstored: map[string]recordCount{}}
	if err := s.migrate(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	if d.GroupCommit {
		s.saves = make(chan *saveReq)
		s.stopped = make(chan struct{})
		s.writerDone = make(chan struct{})
		go s.groupCommit()
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	kind := s.d.Kind
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlstore: the %s store cannot be reached: %w", kind, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if s.d.Lock != nil {
		if err := s.d.Lock(ctx, tx); err != nil {
			return fmt.Errorf("sqlstore: locking the %s store for its schema: %w", kind, err)
		}
	}
	for _, stmt := range v1 {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlstore: creating the %s store's tables: %w", kind, err)
		}
	}
	var v string
	version := 0
	err = tx.QueryRowContext(ctx, s.rebind(`SELECT value FROM agentry_meta WHERE key = ?`), "schema").Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		version = 1 // v1 was just created (or an empty v1 database)
		if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO agentry_meta (key, value) VALUES (?, ?)`), "schema", "1"); err != nil {
			return fmt.Errorf("sqlstore: recording the %s store's schema version: %w", kind, err)
		}
	case err != nil:
		return fmt.Errorf("sqlstore: reading the %s store's schema version: %w", kind, err)
	default:
		version, _ = strconv.Atoi(v)
		if version > SchemaVersion {
			return fmt.Errorf("sqlstore: the %s store has schema version %s and this build reads version %d; run the agentry release that wrote it", kind, v, SchemaVersion)
		}
	}
	if version < 2 {
		if err := s.toV2(ctx, tx); err != nil {
			return fmt.Errorf("sqlstore: upgrading the %s store to schema 2: %w", kind, err)
		}
	}
	if version < 3 {
		if err := s.toV3(ctx, tx); err != nil {
			return fmt.Errorf("sqlstore: upgrading the %s store to schema 3: %w", kind, err)
		}
	}
	for n, step := range [][]string{4: v4, 5: v5, 6: v6, 7: v7, 8: v8, 9: v9, 10: v10(kind), 11: v11} {
		if n <= 3 || version >= n {
			continue
		}
		for _, q := range step {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("sqlstore: upgrading the %s store to schema %d: %w", kind, n, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, s.rebind(`UPDATE agentry_meta SET value = ? WHERE key = ?`), strconv.Itoa(SchemaVersion), "schema"); err != nil {
		return fmt.Errorf("sqlstore: recording the %s store's schema version: %w", kind, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: creating the %s store's tables: %w", kind, err)
	}
	s.prepareQueries()
	for _, p := range []struct {
		to **sql.Stmt
		q  string
	}{{&s.stmt.save, s.q.save}, {&s.stmt.head, s.q.head}, {&s.stmt.insertTurn, s.q.insertTurn}, {&s.stmt.insertMsg, s.q.insertMsg},
		{&s.stmt.insertMsgs, s.q.insertMsgs}, {&s.stmt.recordAdds, s.q.recordAdds}, {&s.stmt.fence, s.q.fence},
		{&s.stmt.recordCount, s.q.recordCount}, {&s.stmt.recordSave, s.q.recordSave}, {&s.stmt.recordAdd, s.q.recordAdd},
		{&s.stmt.recordAddMark, s.q.recordAddMark}} {
		st, err := s.write.PrepareContext(ctx, p.q)
		if err != nil {
			return fmt.Errorf("sqlstore: preparing the %s store's statements: %w", kind, err)
		}
		*p.to = st
	}
	return nil
}

// convCols are the columns scanConversation reads.
const convCols = `id, tenant, principal, state, turns, messages, pending_question, pending_tool, pending_request, provider, binding, last_run_id, created_us, updated_us, version, epoch, turn_begun, agent, model`

func (s *Store) prepareQueries() {
	const cols = convCols
	const owned = ` WHERE id = ? AND tenant = ? AND principal = ?`
	const keepForwards = `(CASE WHEN length(forwards) > 2000 THEN '' ELSE forwards END)` // a short log: the latest few
	s.q = queries{
		create:     s.rebind(`INSERT INTO agentry_conversations (id, tenant, principal, state, turns, messages, pending_question, pending_tool, pending_request, provider, binding, last_run_id, created_us, updated_us, version, turn_seq, agent, model) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`),
		messages:   s.rebind(`SELECT message FROM agentry_messages WHERE conversation_id = ? AND idx < ? ORDER BY idx`),
		head:       s.rebind(`SELECT version, epoch FROM agentry_conversations` + owned),
		insertMsg:  s.rebind(`INSERT INTO agentry_messages (conversation_id, idx, message) VALUES (?, ?, ?)`),
		insertMsgs: s.rebind(`INSERT INTO agentry_messages (conversation_id, idx, message) VALUES (?, ?, ?), (?, ?, ?)`),
		load:       s.rebind(`SELECT ` + cols + ` FROM agentry_conversations` + owned),
		save: s.rebind(`UPDATE agentry_conversations SET state = ?, turns = ?, messages = messages + ?, pending_question = ?, pending_tool = ?, pending_request = ?,
			provider = ?, binding = ?, last_run_id = ?, updated_us = ?, version = ?, turn_seq = turn_seq + ?, epoch = ?, turn_begun = NULL` +
			owned + ` AND version = ? AND messages = ? AND epoch <= ?
			RETURNING turn_seq`),
		lockRow:    s.rebind(`UPDATE agentry_conversations SET turn_seq = turn_seq + 1` + owned),
		appendTurn: s.rebind(`SELECT turn_seq FROM agentry_conversations` + owned),
		insertTurn: s.rebind(`INSERT INTO agentry_turns (conversation_id, seq, run_id, kind, outcome, error, started_us, ended_us, rule,
			tenant, principal, provider, tokens, sandbox_us, cost_nusd, price_version, detail)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		tenantInfo: s.rebind(`SELECT ` + cols + ` FROM agentry_conversations WHERE id = ? AND tenant = ?`),
		countOpen:  s.rebind(`SELECT COUNT(*) FROM agentry_conversations WHERE tenant = ? AND principal = ? AND state <> 'closed'`),
		turns: s.rebind(`SELECT t.seq, t.run_id, t.kind, t.outcome, t.error, t.started_us, t.ended_us, t.rule
			FROM agentry_turns t JOIN agentry_conversations c ON c.id = t.conversation_id
			WHERE c.id = ? AND c.tenant = ? AND c.principal = ? ORDER BY t.seq`),
		fence:      s.rebind(`UPDATE agentry_conversations SET epoch = ?` + owned + ` AND epoch <= ?`),
		fenceState: s.rebind(`SELECT epoch, forwards, state FROM agentry_conversations` + owned),
		begin:      s.rebind(`UPDATE agentry_conversations SET epoch = ?, turn_begun = ?` + owned + ` AND epoch <= ? AND state <> 'closed'`),
		beginForward: s.rebind(`UPDATE agentry_conversations SET epoch = ?, turn_begun = ?, forwards = ` + keepForwards + ` || ?` +
			owned + ` AND epoch <= ? AND state <> 'closed' AND forwards NOT LIKE ?`),
		void: s.rebind(`UPDATE agentry_conversations SET forwards = ` + keepForwards + ` || ?` + owned + ` AND forwards NOT LIKE ?`),

		// Providers' records (the tables keep the names of the first
		// provider that used them).
		recordLoad:    s.rebind(`SELECT head, messages, turns FROM agentry_native WHERE binding = ?`),
		recordEntries: s.rebind(`SELECT message FROM agentry_native_messages WHERE binding = ? AND idx < ? ORDER BY idx`),
		recordMarks:   s.rebind(`SELECT turn_id, messages FROM agentry_native_turns WHERE binding = ? AND idx < ? ORDER BY idx`),
		recordMarked:  s.rebind(`SELECT COUNT(*) FROM agentry_native_turns WHERE binding = ? AND turn_id = ?`),
		recordCount:   s.rebind(`SELECT messages, turns FROM agentry_native WHERE binding = ?`),
		recordSave: s.rebind(`INSERT INTO agentry_native (binding, head, messages, turns, updated_us) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (binding) DO UPDATE SET head = excluded.head, messages = excluded.messages, turns = excluded.turns, updated_us = excluded.updated_us`),
		recordAdd:        s.rebind(`INSERT INTO agentry_native_messages (binding, idx, message) VALUES (?, ?, ?)`),
		recordAdds:       s.rebind(`INSERT INTO agentry_native_messages (binding, idx, message) VALUES (?, ?, ?), (?, ?, ?)`),
		recordAddMark:    s.rebind(`INSERT INTO agentry_native_turns (binding, idx, turn_id, messages) VALUES (?, ?, ?, ?)`),
		recordClear:      s.rebind(`DELETE FROM agentry_native_messages WHERE binding = ?`),
		recordClearMarks: s.rebind(`DELETE FROM agentry_native_turns WHERE binding = ?`),

		usageTotal: s.rebind(`SELECT COALESCE(SUM(CASE WHEN kind = 'message' THEN 1 ELSE 0 END), 0), SUM(tokens), SUM(cost_nusd), COUNT(*) - COUNT(cost_nusd), SUM(sandbox_us)
			FROM agentry_turns WHERE tenant = ? AND ended_us >= ?`),
		usageTotalOne: s.rebind(`SELECT COALESCE(SUM(CASE WHEN kind = 'message' THEN 1 ELSE 0 END), 0), SUM(tokens), SUM(cost_nusd), COUNT(*) - COUNT(cost_nusd), SUM(sandbox_us)
			FROM agentry_turns WHERE tenant = ? AND principal = ? AND ended_us >= ?`),
	}
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Create stores a new conversation.
func (s *Store) Create(ctx context.Context, c host.Conversation) error {
	if err := host.CheckConversation(c); err != nil {
		return err
	}
	if c.Messages != 0 || len(c.Transcript) > 0 {
		return errors.New("sqlstore: a conversation is created without messages; Save adds them")
	}
	pq, pt, pr := pendingCols(c.Pending)
	_, err := s.write.ExecContext(ctx, s.q.create, c.ID, c.Owner.Tenant, c.Owner.Principal, string(c.State), c.Turns,
		pq, pt, pr, c.Provider, string(c.Binding), c.LastRunID, micros(c.CreatedAt), micros(c.UpdatedAt), c.Version, c.Agent, c.Model)
	if err != nil {
		if s.d.UniqueViolation(err) {
			return host.ErrExists
		}
		return s.fail("creating a conversation", err)
	}
	return nil
}

// pendingRequest is the pending_request column: what a decision needs to
// reach the provider's request.
type pendingRequest struct {
	Kind      string          `json:"kind,omitempty"`
	RequestID string          `json:"requestId,omitempty"`
	TurnID    string          `json:"turnId,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
	ArgsCut   int             `json:"argsCut,omitempty"`
}

func pendingCols(p *host.Pending) (q, t, r sql.NullString) {
	if p == nil {
		return
	}
	// Args is valid JSON (the host keeps no other); if not, it is left out.
	pr := pendingRequest{Kind: p.Kind, RequestID: p.RequestID, TurnID: p.TurnID, Args: p.Args, ArgsCut: p.ArgsCut}
	if len(pr.Args) > 0 && !json.Valid(pr.Args) {
		pr.Args = nil
	}
	// Kept as the provider sent it: no HTML escaping of <, > and &.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(pr) // strings and valid JSON always encode
	return sql.NullString{String: p.Question, Valid: true}, sql.NullString{String: p.Tool, Valid: true}, sql.NullString{String: strings.TrimSuffix(b.String(), "\n"), Valid: true}
}

func (s *Store) fail(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sqlstore: %s in the %s store: %w", what, s.d.Kind, err)
	}
	return &Error{Op: what, Kind: s.d.Kind, Err: err}
}

// Error is a failure of the store itself (not a missing or changed
// conversation).
type Error struct {
	Op, Kind string
	Err      error
}

func (e *Error) Error() string {
	return fmt.Sprintf("sqlstore: %s in the %s store failed: %v", e.Op, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

type scanner interface{ Scan(...any) error }

func scanConversation(row scanner) (host.Conversation, error) {
	var (
		c                 host.Conversation
		state, lastRun    string
		prov, binding     string
		pq, pt, pr        sql.NullString
		created, updated  int64
		tenant, principal string
		n                 int64
		begun             sql.NullString
	)
	if err := row.Scan(&c.ID, &tenant, &principal, &state, &c.Turns, &n, &pq, &pt, &pr, &prov, &binding, &lastRun, &created, &updated, &c.Version,
		&c.Epoch, &begun, &c.Agent, &c.Model); err != nil {
		return host.Conversation{}, err
	}
	if begun.Valid {
		c.Begun = new(host.Begun)
		if err := json.Unmarshal([]byte(begun.String), c.Begun); err != nil {
			return host.Conversation{}, fmt.Errorf("sqlstore: the stored turn in flight of %s is not JSON: %w", c.ID, err)
		}
	}
	c.Owner = tool.Identity{Tenant: tenant, Principal: principal}
	c.State = host.State(state)
	c.Messages = int(n)
	c.Provider, c.Binding = prov, provider.Binding(binding)
	c.LastRunID = lastRun
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	if pq.Valid {
		c.Pending = &host.Pending{Question: pq.String, Tool: pt.String}
		if pr.Valid {
			var r pendingRequest
			if err := json.Unmarshal([]byte(pr.String), &r); err != nil {
				return host.Conversation{}, fmt.Errorf("sqlstore: the stored pending request of %s is not JSON: %w", c.ID, err)
			}
			c.Pending.Kind, c.Pending.RequestID, c.Pending.TurnID = r.Kind, r.RequestID, r.TurnID
			c.Pending.Args, c.Pending.ArgsCut = r.Args, r.ArgsCut
		}
	}
	return c, nil
}

// Load returns the conversation with its transcript.
func (s *Store) Load(ctx context.Context, owner tool.Identity, id string) (host.Conversation, error) {
	c, err := s.Info(ctx, owner, id)
	if err != nil || c.Messages == 0 {
		if err == nil {
			c.Transcript = []host.Message{}
		}
		return c, err
	}
	// Only the messages the row counts: a save committed since appends
	// past them, and what was read stays the conversation as it was.
	rows, err := s.read.QueryContext(ctx, s.q.messages, id, c.Messages)
	if err != nil {
		return host.Conversation{}, s.fail("loading a transcript", err)
	}
	defer rows.Close()
	msgs := make([]host.Message, 0, c.Messages)
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return host.Conversation{}, s.fail("loading a transcript", err)
		}
		var m host.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return host.Conversation{}, fmt.Errorf("sqlstore: a stored message of %s is not JSON: %w", id, err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return host.Conversation{}, s.fail("loading a transcript", err)
	}
	if len(msgs) != c.Messages {
		return host.Conversation{}, s.fail("loading a transcript", fmt.Errorf("%d messages stored, %d recorded", len(msgs), c.Messages))
	}
	c.Transcript = msgs
	return c, nil
}

// Info is Load without the transcript.
func (s *Store) Info(ctx context.Context, owner tool.Identity, id string) (host.Conversation, error) {
	c, err := scanConversation(s.read.QueryRowContext(ctx, s.q.load, id, owner.Tenant, owner.Principal))
	if errors.Is(err, sql.ErrNoRows) {
		return host.Conversation{}, host.ErrNotFound
	}
	if err != nil {
		return host.Conversation{}, s.fail("loading a conversation", err)
	}
	return c, nil
}

// saveReq is one Save, or one provider record written alone, ready to
// write.
type saveReq struct {
	ctx context.Context
	// record, when set, makes this a provider record's write instead.
	record     *host.RecordWrite
	c          host.Conversation
	add        []host.Message
	pq, pt, pr sql.NullString
	turn       *host.Turn
	epoch      int64
	records    []host.RecordWrite
	done       chan saveRes // buffered: the writer never waits on it
}

type saveRes struct {
	version int64
	err     error
}

// Save writes one turn's changes in one transaction.
func (s *Store) Save(ctx context.Context, u host.Update) (int64, error) {
	c := u.Conversation
	if err := host.CheckConversation(c); err != nil {
		return 0, err
	}
	r := &saveReq{ctx: ctx, c: c, add: u.Append, turn: u.Turn, epoch: u.Epoch, records: u.Records}
	r.pq, r.pt, r.pr = pendingCols(c.Pending)
	return s.submit(ctx, r)
}

// submit hands r to the group-commit writer, or writes it alone where
// there is none.
func (s *Store) submit(ctx context.Context, r *saveReq) (int64, error) {
	if s.saves == nil {
		return s.saveAlone(ctx, r)
	}
	r.done = make(chan saveRes, 1)
	select {
	case s.saves <- r:
	case <-s.stopped:
		return 0, s.fail("saving", errors.New("the store is closed"))
	case <-ctx.Done():
		return 0, s.fail("saving", ctx.Err())
	}
	res := <-r.done
	return res.version, res.err
}

// saveAlone writes one save in a transaction of its own.
func (s *Store) saveAlone(ctx context.Context, r *saveReq) (int64, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	inTx := map[string]recordCount{}
	v, err := s.saveIn(ctx, tx, r, inTx)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail("saving a conversation", err)
	}
	s.noteStored(inTx)
	return v, nil
}

// saveIn writes r inside tx. ErrConflict, ErrFenced and ErrNotFound leave
// tx usable: nothing was written. Any other error means tx must be rolled
// back. inTx gathers what the provider records written in tx leave in
// the tables (earlier writes of the same transaction are in it already).
func (s *Store) saveIn(ctx context.Context, tx *sql.Tx, r *saveReq, inTx map[string]recordCount) (int64, error) {
	if w := r.record; w != nil {
		if f := w.Fence; f != nil {
			if err := s.fenceIn(ctx, tx, f); err != nil {
				return 0, err
			}
		}
		return 0, s.writeRecord(ctx, tx, w, inTx)
	}
	c := r.c
	// One statement checks and moves the conversation on: the version,
	// message count and epoch it was read at must still hold (PostgreSQL
	// re-checks them once the row lock is theirs), so a loser has written
	// nothing; only then are messages and records written.
	next := c.Version + 1
	var bump int64
	if r.turn != nil {
		bump = 1
	}
	var seq int64
	err := tx.StmtContext(ctx, s.stmt.save).QueryRowContext(ctx, string(c.State), c.Turns, len(r.add), r.pq, r.pt, r.pr,
		c.Provider, string(c.Binding), c.LastRunID, micros(c.UpdatedAt), next, bump, r.epoch,
		c.ID, c.Owner.Tenant, c.Owner.Principal, c.Version, c.Messages, r.epoch).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, s.refusal(ctx, tx, c, r.epoch)
	case err != nil:
		return 0, s.fail("saving a conversation", err)
	}
	if err := s.appendRows(ctx, tx, s.stmt.insertMsg, s.stmt.insertMsgs, c.ID, c.Messages, len(r.add),
		func(i int) ([]byte, error) { return json.Marshal(r.add[i]) }); err != nil {
		return 0, s.fail("appending to a transcript", err)
	}
	if t := r.turn; t != nil {
		if err := s.insertTurn(ctx, tx, c.ID, seq, t); err != nil {
			return 0, err
		}
	}
	for i := range r.records {
		if err := s.writeRecord(ctx, tx, &r.records[i], inTx); err != nil {
			return 0, err
		}
	}
	return next, nil
}

// refusal says why a save moved nothing: the conversation is gone, a
// newer epoch wrote it, or another writer moved it on.
func (s *Store) refusal(ctx context.Context, tx *sql.Tx, c host.Conversation, epoch int64) error {
	var version, stored int64
	err := tx.StmtContext(ctx, s.stmt.head).QueryRowContext(ctx, c.ID, c.Owner.Tenant, c.Owner.Principal).Scan(&version, &stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return host.ErrNotFound
	case err != nil:
		return s.fail("saving a conversation", err)
	case stored > epoch:
		return host.ErrFenced
	}
	return host.ErrConflict
}

// appendRows inserts n rows (key, from+i, body(i)) into a table of that
// shape, two a statement (a turn's question and answer go in one), with
// one and two prepared for one row and for two.
func (s *Store) appendRows(ctx context.Context, tx *sql.Tx, one, two *sql.Stmt, key string, from, n int, body func(int) ([]byte, error)) error {
	var one1, two1 *sql.Stmt
	for i := 0; i < n; {
		a, err := body(i)
		if err != nil {
			return fmt.Errorf("encoding row %d: %w", from+i, err)
		}
		if i+1 == n {
			if one1 == nil {
				one1 = tx.StmtContext(ctx, one)
			}
			_, err = one1.ExecContext(ctx, key, from+i, string(a))
			return err
		}
		b, err := body(i + 1)
		if err != nil {
			return fmt.Errorf("encoding row %d: %w", from+i+1, err)
		}
		if two1 == nil {
			two1 = tx.StmtContext(ctx, two)
		}
		if _, err := two1.ExecContext(ctx, key, from+i, string(a), key, from+i+1, string(b)); err != nil {
			return err
		}
		i += 2
	}
	return nil
}

func (s *Store) insertTurn(ctx context.Context, tx *sql.Tx, id string, seq int64, t *host.Turn) error {
	if t.Usage != nil {
		t.Usage.Seq = seq
	}
	args := s.usageArgs(t.Usage, []any{id, seq, t.RunID, t.Kind, t.Outcome, t.Error, micros(t.Started), micros(t.Ended), t.Rule})
	if _, err := tx.StmtContext(ctx, s.stmt.insertTurn).ExecContext(ctx, args...); err != nil {
		return s.fail("recording a turn", err)
	}
	return nil
}

// AppendTurn adds a turn-log entry and leaves the conversation's version
// as it is.
func (s *Store) AppendTurn(ctx context.Context, owner tool.Identity, id string, t host.Turn) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("recording a turn", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// Taking the row first serialises this with saves of the conversation.
	res, err := tx.ExecContext(ctx, s.q.lockRow, id, owner.Tenant, owner.Principal)
	if err != nil {
		return s.fail("recording a turn", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.fail("recording a turn", err)
	} else if n == 0 {
		return host.ErrNotFound
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, s.q.appendTurn, id, owner.Tenant, owner.Principal).Scan(&seq); err != nil {
		return s.fail("recording a turn", err)
	}
	if err := s.insertTurn(ctx, tx, id, seq, &t); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.fail("recording a turn", err)
	}
	return nil
}

// maxBatch bounds the saves one group commit writes.
const maxBatch = 128

// groupCommit is SQLite's single writer: it takes the saves waiting at
// that moment and writes them in one transaction, so concurrent turns
// share one commit instead of queueing for one each. Each save still
// stands alone: a conflict refuses only that save; a failure of the
// batch retries every save in a transaction of its own.
func (s *Store) groupCommit() {
	defer close(s.writerDone)
	for {
		var first *saveReq
		select {
		case first = <-s.saves:
		case <-s.stopped:
			return
		}
		batch := []*saveReq{first}
		// Take what waits; then, while that finds more, let the goroutines
		// that are ready run first (a turn about to save): on a busy host
		// the commit carries more turns, on an idle one nothing is ready
		// and it goes at once.
		for round := 0; round < 3 && len(batch) < maxBatch; round++ {
			n := len(batch)
			if round > 0 {
				runtime.Gosched()
			}
		more:
			for len(batch) < maxBatch {
				select {
				case r := <-s.saves:
					batch = append(batch, r)
				default:
					break more
				}
			}
			if round > 0 && len(batch) == n {
				break
			}
		}
		s.commitBatch(batch)
	}
}

// settle answers a save's caller.
func (s *Store) settle(r *saveReq, res saveRes) { r.done <- res }

// refusedCleanly reports the errors saveIn returns having written
// nothing, so the transaction it shares stays usable.
func refusedCleanly(err error) bool {
	return errors.Is(err, host.ErrConflict) || errors.Is(err, host.ErrNotFound) || errors.Is(err, host.ErrFenced)
}

func (s *Store) commitBatch(batch []*saveReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			s.settle(r, saveRes{err: s.fail("saving a conversation", err)})
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		v, err := s.saveAlone(context.WithoutCancel(live[0].ctx), live[0])
		s.settle(live[0], saveRes{version: v, err: err})
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
		defer tx.Rollback()              //nolint:errcheck // a no-op after Commit
		inTx := map[string]recordCount{} // two writes of one record may share the batch
		for i, r := range live {
			v, err := s.saveIn(ctx, tx, r, inTx)
			if err != nil && !refusedCleanly(err) {
				return false
			}
			results[i] = saveRes{version: v, err: err}
		}
		if tx.Commit() != nil {
			return false
		}
		s.noteStored(inTx)
		return true
	}()
	if !ok {
		// Find out which save was at fault: each on its own, settled
		// before the next (which may write the same native record) goes.
		for _, r := range live {
			v, err := s.saveAlone(ctx, r)
			s.settle(r, saveRes{version: v, err: err})
		}
		return
	}
	for i, r := range live {
		s.settle(r, results[i])
	}
}

// List returns the owner's conversations, newest first.
func (s *Store) List(ctx context.Context, owner tool.Identity, opt host.ListOptions) ([]host.Conversation, error) {
	q, args := s.listQuery(`tenant = ? AND principal = ?`, opt, owner.Tenant, owner.Principal)
	return s.listRows(ctx, q, args...)
}

// ListTenant returns a tenant's conversations, every principal's, newest
// first.
func (s *Store) ListTenant(ctx context.Context, tenant string, opt host.ListOptions) ([]host.Conversation, error) {
	q, args := s.listQuery(`tenant = ?`, opt, tenant)
	return s.listRows(ctx, q, args...)
}

// listQuery is a listing of the conversations who selects, newest first
// by creation then id (both fixed, so a keyset cursor walks them once).
func (s *Store) listQuery(who string, opt host.ListOptions, args ...any) (string, []any) {
	q := `SELECT ` + convCols + ` FROM agentry_conversations WHERE ` + who
	if opt.OpenOnly {
		q += ` AND state <> 'closed'`
	}
	if c := opt.After; c != nil {
		us := micros(c.CreatedAt)
		q += ` AND (created_us < ? OR (created_us = ? AND id < ?))`
		args = append(args, us, us, c.ID)
	}
	return s.rebind(q + ` ORDER BY created_us DESC, id DESC LIMIT ?`), append(args, listLimit(opt))
}

// TenantInfo is Info for the tenant's admins: the conversation, with its
// owner, when it belongs to tenant.
func (s *Store) TenantInfo(ctx context.Context, tenant, id string) (host.Conversation, error) {
	c, err := scanConversation(s.read.QueryRowContext(ctx, s.q.tenantInfo, id, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return host.Conversation{}, host.ErrNotFound
	}
	if err != nil {
		return host.Conversation{}, s.fail("loading a conversation", err)
	}
	return c, nil
}

// listLimit is the rows a listing reads: opt.Limit, default MaxList; at
// most one more than MaxList (the host asks one more than a page, to know
// whether a next page exists).
func listLimit(opt host.ListOptions) int {
	switch {
	case opt.Limit <= 0:
		return host.MaxList
	case opt.Limit > host.MaxList+1:
		return host.MaxList + 1
	}
	return opt.Limit
}

// listRows runs a listing query and reads its conversations.
func (s *Store) listRows(ctx context.Context, q string, args ...any) ([]host.Conversation, error) {
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.fail("listing conversations", err)
	}
	defer rows.Close()
	var out []host.Conversation
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

// CountOpen counts the owner's conversations that are not closed.
func (s *Store) CountOpen(ctx context.Context, owner tool.Identity) (int, error) {
	var n int
	if err := s.read.QueryRowContext(ctx, s.q.countOpen, owner.Tenant, owner.Principal).Scan(&n); err != nil {
		return 0, s.fail("counting conversations", err)
	}
	return n, nil
}

// Turns returns a conversation's turn log, oldest first.
func (s *Store) Turns(ctx context.Context, owner tool.Identity, id string) ([]host.Turn, error) {
	if _, err := s.Info(ctx, owner, id); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, s.q.turns, id, owner.Tenant, owner.Principal)
	if err != nil {
		return nil, s.fail("reading the turn log", err)
	}
	defer rows.Close()
	var out []host.Turn
	for rows.Next() {
		var t host.Turn
		var started, ended int64
		if err := rows.Scan(&t.Seq, &t.RunID, &t.Kind, &t.Outcome, &t.Error, &started, &ended, &t.Rule); err != nil {
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

// Ping reports whether the store can be reached.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.read.PingContext(ctx); err != nil {
		return s.fail("reaching the store", err)
	}
	var one int
	if err := s.read.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return s.fail("reaching the store", err)
	}
	return nil
}

// Close releases the store. Safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.stopped != nil {
			close(s.stopped)
			<-s.writerDone
		}
		for _, st := range []*sql.Stmt{s.stmt.save, s.stmt.head, s.stmt.insertTurn, s.stmt.insertMsg, s.stmt.insertMsgs, s.stmt.recordAdds,
			s.stmt.fence, s.stmt.recordCount, s.stmt.recordSave, s.stmt.recordAdd, s.stmt.recordAddMark} {
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

// DollarParams rewrites ? placeholders as $1, $2, … (none of the
// package's SQL has a ? inside a string literal).
func DollarParams(q string) string {
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
