package sqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm"
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
	rec, err := s.NativeStore().Load(ctx, c.Binding)
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
