package sqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// schema1 is the store as the host of the first build wrote it: the
// agent's whole transcript, and a paused turn's checkpoint.
var schema1 = []string{
	`CREATE TABLE agentry_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
	`CREATE TABLE agentry_conversations (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, principal TEXT NOT NULL, state TEXT NOT NULL,
		turns INTEGER NOT NULL, transcript_head TEXT, messages BIGINT NOT NULL, pending_question TEXT, pending_tool TEXT,
		checkpoint TEXT, last_run_id TEXT NOT NULL, created_us BIGINT NOT NULL, updated_us BIGINT NOT NULL, version BIGINT NOT NULL)`,
	`CREATE INDEX agentry_conversations_owner ON agentry_conversations (tenant, principal, state, updated_us)`,
	`CREATE TABLE agentry_messages (conversation_id TEXT NOT NULL REFERENCES agentry_conversations (id), idx BIGINT NOT NULL,
		message TEXT NOT NULL, PRIMARY KEY (conversation_id, idx))`,
	`CREATE TABLE agentry_turns (conversation_id TEXT NOT NULL REFERENCES agentry_conversations (id), seq BIGINT NOT NULL,
		run_id TEXT NOT NULL, kind TEXT NOT NULL, outcome TEXT NOT NULL, error TEXT NOT NULL, started_us BIGINT NOT NULL,
		ended_us BIGINT NOT NULL, PRIMARY KEY (conversation_id, seq))`,
	`INSERT INTO agentry_meta VALUES ('schema', '1')`,
	`INSERT INTO agentry_conversations VALUES ('ses_a', 'acme', 'alice', 'open', 1,
		'{"version":1,"identity":{"tenant":"acme","principal":"alice","conversationId":"ses_a"}}', 4, NULL, NULL, NULL, 'run-1', 1, 2, 1)`,
	`INSERT INTO agentry_messages VALUES ('ses_a', 0, '{"role":"user","content":"compute 6*7"}')`,
	`INSERT INTO agentry_messages VALUES ('ses_a', 1, '{"role":"assistant","toolCalls":[{"id":"c1","name":"run_code","args":{"code":"print(6*7)"}}]}')`,
	`INSERT INTO agentry_messages VALUES ('ses_a', 2, '{"role":"tool","content":"42","toolCallId":"c1","toolName":"run_code"}')`,
	`INSERT INTO agentry_messages VALUES ('ses_a', 3, '{"role":"assistant","content":"It is 42."}')`,
	`INSERT INTO agentry_turns VALUES ('ses_a', 1, 'run-1', 'message', 'answered', '', 1, 2)`,
	`INSERT INTO agentry_conversations VALUES ('ses_p', 'acme', 'alice', 'paused', 1, NULL, 0, 'deploy?', 'deploy',
		'{"version":1,"id":"cp-1"}', 'run-2', 1, 2, 1)`,
	`INSERT INTO agentry_turns VALUES ('ses_p', 1, 'run-2', 'message', 'paused', '', 1, 2)`,
}

// A store written by the first build keeps working: every conversation
// moves onto the native provider, with its agent transcript under a
// binding, its host transcript of what was said and answered, and a pause
// given up with a note (nothing is silently lost).
func TestSchema1Upgrades(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentry.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range schema1 {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("opening a schema-1 store: %v", err)
	}
	defer s.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the store file is %v after opening, want 0600", fi.Mode().Perm())
	}
	alice := tool.Identity{Tenant: "acme", Principal: "alice"}
	c, err := s.Load(ctx, alice, "ses_a")
	if err != nil {
		t.Fatal(err)
	}
	if c.Provider != "agentry-native" || c.Binding == "" || c.Messages != 2 || len(c.Transcript) != 2 ||
		c.Transcript[0] != (host.Message{Role: "user", Content: "compute 6*7"}) || c.Transcript[1].Content != "It is 42." {
		t.Fatalf("upgraded conversation: %+v", c)
	}
	rec, err := native.HostStore(s).Load(ctx, c.Binding)
	if err != nil {
		t.Fatalf("the agent's transcript under the binding: %v", err)
	}
	if msgs := rec.Conversation.Messages; len(msgs) != 4 || msgs[2].Role != llm.RoleTool || msgs[2].Content != "42" ||
		rec.Conversation.Identity == nil || rec.Conversation.Identity.ConversationID != "ses_a" {
		t.Fatalf("the native record: %+v", rec.Conversation)
	}
	p, err := s.Info(ctx, alice, "ses_p")
	if err != nil || p.State != host.StateOpen || p.Pending != nil || p.Binding != "" {
		t.Fatalf("the paused conversation after the upgrade: %+v %v", p, err)
	}
	ts, _ := s.Turns(ctx, alice, "ses_p")
	if len(ts) != 2 || ts[1].Kind != "upgrade" || ts[1].Outcome != host.TurnAbandoned || ts[1].Error == "" {
		t.Fatalf("the pause's turn log: %+v", ts)
	}
	// A save continues the log and the transcript where they were.
	c.Turns++
	if _, err := s.Save(ctx, host.Update{Conversation: c, Append: []host.Message{{Role: "user", Content: "and 7*8?"}},
		Turn: &host.Turn{Kind: "message", Outcome: host.TurnAnswered}}); err != nil {
		t.Fatal(err)
	}
	ts, _ = s.Turns(ctx, alice, "ses_a")
	if len(ts) != 2 || ts[1].Seq != 2 {
		t.Fatalf("the turn log after a save: %+v", ts)
	}
	s.Close()
	// Opening again changes nothing more.
	s2, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if c2, _ := s2.Load(ctx, alice, "ses_a"); c2.Binding != c.Binding || len(c2.Transcript) != 3 {
		t.Fatalf("a second open: %+v", c2)
	}
}

// schema2 is the native table as the second build wrote it: the turn
// marks inside the record's head.
var schema2 = []string{
	`CREATE TABLE agentry_native (binding TEXT PRIMARY KEY, head TEXT NOT NULL, messages BIGINT NOT NULL, updated_us BIGINT NOT NULL)`,
	`CREATE TABLE agentry_native_messages (binding TEXT NOT NULL REFERENCES agentry_native (binding), idx BIGINT NOT NULL,
		message TEXT NOT NULL, PRIMARY KEY (binding, idx))`,
	`INSERT INTO agentry_native VALUES ('b-1', '{"conversation":{"version":1,"identity":{"tenant":"acme","principal":"alice"}},"turns":[{"id":"t1","messages":2},{"id":"t2","messages":4}]}', 4, 1)`,
	`INSERT INTO agentry_native VALUES ('b-2', '{"conversation":{"version":1},"turns":null}', 0, 1)`,
	`INSERT INTO agentry_native_messages VALUES ('b-1', 0, '{"role":"user","content":"one"}')`,
	`INSERT INTO agentry_native_messages VALUES ('b-1', 1, '{"role":"assistant","content":"two"}')`,
	`INSERT INTO agentry_native_messages VALUES ('b-1', 2, '{"role":"user","content":"three"}')`,
	`INSERT INTO agentry_native_messages VALUES ('b-1', 3, '{"role":"assistant","content":"four"}')`,
}

// A schema-2 store keeps its native conversations whole: their turn
// marks move out of the head into rows, so a branch through an old turn
// still finds it, and the next turn appends to them.
func TestSchema2Upgrades(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentry.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// The host's tables of schema 2 are schema 1's with the provider
	// columns; the upgrade from 1 is tested above, so they start empty.
	for _, q := range append(schema1[:6:6], schema2...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range []string{
		`ALTER TABLE agentry_conversations ADD COLUMN provider TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE agentry_conversations ADD COLUMN binding TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE agentry_conversations ADD COLUMN pending_request TEXT`,
		`ALTER TABLE agentry_conversations ADD COLUMN turn_seq BIGINT NOT NULL DEFAULT 0`,
		`UPDATE agentry_meta SET value = '2' WHERE key = 'schema'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("opening a schema-2 store: %v", err)
	}
	ns := native.HostStore(s)
	rec, err := ns.Load(ctx, "b-1")
	if err != nil || len(rec.Conversation.Messages) != 4 || len(rec.Turns) != 2 || rec.Turns[1] != (native.TurnMark{ID: "t2", Messages: 4}) ||
		rec.Conversation.Identity == nil || rec.Conversation.Identity.Principal != "alice" {
		t.Fatalf("the upgraded record: %+v %v", rec, err)
	}
	if rec, err := ns.Load(ctx, "b-2"); err != nil || len(rec.Turns) != 0 || len(rec.Conversation.Messages) != 0 {
		t.Fatalf("an upgraded record without turns: %+v %v", rec, err)
	}
	rec.Conversation.Messages = append(rec.Conversation.Messages, llm.Message{Role: llm.RoleUser, Content: "five"})
	rec.Turns = append(rec.Turns, native.TurnMark{ID: "t3", Messages: 5})
	if err := ns.Save(ctx, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	// Outside a turn of a host, the save is written at once; close the
	// store and look at the rows.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var head string
	var marks int
	if err := db.QueryRow(`SELECT head, (SELECT COUNT(*) FROM agentry_native_turns WHERE binding = 'b-1') FROM agentry_native WHERE binding = 'b-1'`).Scan(&head, &marks); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(head, "t1") || marks != 3 {
		t.Fatalf("after the upgrade and a turn: head %s, %d mark rows", head, marks)
	}
	s2, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := native.HostStore(s2).Load(ctx, "b-1")
	if err != nil || len(got.Turns) != 3 || got.Turns[0] != (native.TurnMark{ID: "t1", Messages: 2}) || got.Turns[2].ID != "t3" ||
		len(got.Conversation.Messages) != 5 {
		t.Fatalf("reopened: %+v %v", got, err)
	}
}
