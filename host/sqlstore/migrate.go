package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// The upgrades read and write rows as the releases that wrote them left
// them, with the shapes spelled out here: they depend on no package's
// types, which move on while old rows stay as they are.

// schema1Provider is the provider schema-1 conversations move to: the
// first build's host ran agentry's own agent, which the native provider
// ("agentry-native") now serves.
const schema1Provider = "agentry-native"

// rowMessage is what the upgrade reads of a stored model message.
type rowMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// rowMark is a turn mark as schema 2 kept it in a native record's head.
type rowMark struct {
	ID       string `json:"id"`
	Messages int64  `json:"messages"`
}

// marksOutOfHead splits a schema-2 native record's head: the head without
// its turn marks, and the marks.
func marksOutOfHead(head string) ([]byte, []rowMark, error) {
	var rec map[string]json.RawMessage
	if err := json.Unmarshal([]byte(head), &rec); err != nil {
		return nil, nil, fmt.Errorf("its record is not a JSON object: %w", err)
	}
	if rec == nil { // null: a record of nothing
		rec = map[string]json.RawMessage{}
	}
	var marks []rowMark
	if raw, ok := rec["turns"]; ok {
		if err := json.Unmarshal(raw, &marks); err != nil {
			return nil, nil, fmt.Errorf("its turn marks are not a JSON list of marks: %w", err)
		}
	}
	rec["turns"] = json.RawMessage("null")
	b, err := json.Marshal(rec)
	return b, marks, err
}

// nativeHead is the head of a native record made from a schema-1
// conversation: its transcript head (version and identity; the messages
// are rows), with no turn marks.
func nativeHead(transcriptHead sql.NullString) ([]byte, error) {
	var conv map[string]json.RawMessage
	if transcriptHead.Valid {
		if err := json.Unmarshal([]byte(transcriptHead.String), &conv); err != nil {
			return nil, fmt.Errorf("the stored transcript is not a JSON object: %w", err)
		}
	}
	if conv == nil { // none, or null
		conv = map[string]json.RawMessage{}
	}
	conv["messages"] = json.RawMessage("null")
	return json.Marshal(map[string]any{"conversation": conv, "turns": nil})
}

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
	var raws []string
	var msgs []rowMessage
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			rows.Close()
			return err
		}
		var m rowMessage
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			rows.Close()
			return fmt.Errorf("a stored message is not JSON: %w", err)
		}
		raws, msgs = append(raws, raw), append(msgs, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	binding := ""
	if len(msgs) > 0 || l.head.Valid {
		binding = "schema1-" + l.id
		head, err := nativeHead(l.head)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_native (binding, head, messages, updated_us) VALUES (?, ?, ?, ?)`), binding, string(head), len(msgs), now); err != nil {
			return err
		}
		for i, raw := range raws { // the model's messages, as they were stored
			if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_native_messages (binding, idx, message) VALUES (?, ?, ?)`), binding, i, raw); err != nil {
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
		if (m.Role != "user" && m.Role != "assistant") || m.Content == "" {
			continue
		}
		b, _ := json.Marshal(m)
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
		schema1Provider, binding, n, state, l.turnSeq, l.id)
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
		b, marks, err := marksOutOfHead(h.head)
		if err != nil {
			return fmt.Errorf("native conversation %s: %w", h.binding, err)
		}
		if len(marks) == 0 {
			continue
		}
		for i, m := range marks {
			if _, err := tx.ExecContext(ctx, r(`INSERT INTO agentry_native_turns (binding, idx, turn_id, messages) VALUES (?, ?, ?, ?)`), h.binding, i, m.ID, m.Messages); err != nil {
				return err
			}
		}
		n := len(marks)
		if _, err := tx.ExecContext(ctx, r(`UPDATE agentry_native SET head = ?, turns = ? WHERE binding = ?`), string(b), n, h.binding); err != nil {
			return err
		}
	}
	return nil
}
