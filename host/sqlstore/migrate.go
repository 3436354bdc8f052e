package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider/native"
)

// legacy is a schema-1 conversation: the host ran an agent directly and
// kept its whole transcript (and a paused turn's checkpoint).
type legacy struct {
	id, state string
	head      sql.NullString
	turnSeq   int64
}

// toV2 adds the provider columns and moves every schema-1 conversation
// onto the native provider: its agent transcript becomes a native record
// under a binding of its own, its host transcript keeps what the person
// said and what the agent answered, and a turn it was paused in is
// abandoned with a note in its turn log (a schema-1 checkpoint cannot be
// resumed through the contract).
func (s *Store) toV2(ctx context.Context, tx *sql.Tx) error {
	for _, stmt := range v2 {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, state, transcript_head, turn_seq FROM agentry_conversations WHERE provider = ''`)
	if err != nil {
		return err
	}
	var olds []legacy
	for rows.Next() {
		var l legacy
		if err := rows.Scan(&l.id, &l.state, &l.head, &l.turnSeq); err != nil {
			rows.Close()
			return err
		}
		olds = append(olds, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	now := micros(time.Now())
	for _, l := range olds {
		if err := s.upgrade(ctx, tx, l, now); err != nil {
			return fmt.Errorf("conversation %s: %w", l.id, err)
		}
	}
	return nil
}

func (s *Store) upgrade(ctx context.Context, tx *sql.Tx, l legacy, now int64) error {
	r := s.rebind
	rows, err := tx.QueryContext(ctx, r(`SELECT message FROM agentry_messages WHERE conversation_id = ? ORDER BY idx`), l.id)
	if err != nil {
		return err
	}
	var msgs []llm.Message
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			rows.Close()
			return err
		}
		var m llm.Message
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			rows.Close()
			return fmt.Errorf("a stored message is not JSON: %w", err)
		}
		msgs = append(msgs, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	binding := ""
	if len(msgs) > 0 || l.head.Valid {
		var conv agent.Conversation
		if l.head.Valid {
			if err := json.Unmarshal([]byte(l.head.String), &conv); err != nil {
				return fmt.Errorf("the stored transcript is not JSON: %w", err)
			}
		}
		binding = "schema1-" + l.id
		rec, err := json.Marshal(native.Record{Conversation: conv}) // the head: no messages
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_native (binding, head, messages, updated_us) VALUES (?, ?, ?, ?)`), binding, string(rec), len(msgs), now); err != nil {
			return err
		}
		for i, m := range msgs {
			b, _ := json.Marshal(m) // it was read from JSON
			if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_native_messages (binding, idx, message) VALUES (?, ?, ?)`), binding, i, string(b)); err != nil {
				return err
			}
		}
	}
	// The host's transcript: what was said and answered.
	if _, err := tx.ExecContext(ctx, r(`DELETE FROM agentry_messages WHERE conversation_id = ?`), l.id); err != nil {
		return err
	}
	n := 0
	for _, m := range msgs {
		if (m.Role != llm.RoleUser && m.Role != llm.RoleAssistant) || m.Content == "" {
			continue
		}
		b, _ := json.Marshal(struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{string(m.Role), m.Content})
		if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_messages (conversation_id, idx, message) VALUES (?, ?, ?)`), l.id, n, string(b)); err != nil {
			return err
		}
		n++
	}
	state := l.state
	if state == "paused" {
		state = "open"
		if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_turns (conversation_id, seq, run_id, kind, outcome, error, started_us, ended_us)
			VALUES (?, ?, '', 'upgrade', 'abandoned', ?, ?, ?)`), l.id, l.turnSeq+1,
			"the host was upgraded while this turn waited for a decision; the pause was given up; send the message again", now, now); err != nil {
			return err
		}
		l.turnSeq++
	}
	// Only a paused conversation had a pending question; none has now.
	_, err = tx.ExecContext(ctx, r(`UPDATE agentry_conversations SET provider = ?, binding = ?, messages = ?, state = ?,
		pending_question = NULL, pending_tool = NULL, checkpoint = NULL, transcript_head = NULL, turn_seq = ? WHERE id = ?`),
		native.DefaultKey, binding, n, state, l.turnSeq, l.id)
	return err
}

// toV3 gives native records their turn-mark rows: the marks each head
// holds move into agentry_native_turns, and the head is written again
// without them.
func (s *Store) toV3(ctx context.Context, tx *sql.Tx) error {
	for _, stmt := range v3 {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT binding, head FROM agentry_native`)
	if err != nil {
		return err
	}
	type head struct{ binding, head string }
	var heads []head
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.binding, &h.head); err != nil {
			rows.Close()
			return err
		}
		heads = append(heads, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	r := s.rebind
	for _, h := range heads {
		var rec native.Record
		if err := json.Unmarshal([]byte(h.head), &rec); err != nil {
			return fmt.Errorf("native conversation %s: its record is not JSON: %w", h.binding, err)
		}
		if len(rec.Turns) == 0 {
			continue
		}
		for i, m := range rec.Turns {
			if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_native_turns (binding, idx, turn_id, messages) VALUES (?, ?, ?, ?)`), h.binding, i, m.ID, m.Messages); err != nil {
				return err
			}
		}
		n := len(rec.Turns)
		rec.Turns = nil
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, r(`UPDATE agentry_native SET head = ?, turns = ? WHERE binding = ?`), string(b), n, h.binding); err != nil {
			return err
		}
	}
	return nil
}
