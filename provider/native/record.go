package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// The MemoryStore keeps each record as one flat byte slice in this
// encoding: nothing a caller holds is shared with it, and a store of
// thousands of conversations holds no pointers for the garbage collector
// to walk. The rare pending turn (a checkpoint) is kept as its JSON.
//
//	record   = version:uvarint identity messages turns pending
//	identity = 0 | 1 tenant principal conversationId
//	messages = n:uvarint { role content calls toolCallId toolName isError:byte }
//	calls    = n:uvarint { id name args }
//	turns    = n:uvarint { id messages:uvarint }
//	pending  = 0 | 1 json
//	string   = len:uvarint bytes
//
// TestRecordCodecKnowsEveryField fails when a field is added to a type
// the encoding covers, so it cannot fall silently out of date.

const recordEncoding = 1

var errCorruptRecord = errors.New("native: a stored record is corrupt")

func encodeRecord(r Record) ([]byte, error) {
	n := 16
	for _, m := range r.Conversation.Messages {
		n += 8 + len(m.Role) + len(m.Content) + len(m.ToolCallID) + len(m.ToolName)
		for _, c := range m.ToolCalls {
			n += 6 + len(c.ID) + len(c.Name) + len(c.Args)
		}
	}
	for _, t := range r.Turns {
		n += 4 + len(t.ID)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, recordEncoding)
	b = binary.AppendUvarint(b, uint64(r.Conversation.Version))
	if id := r.Conversation.Identity; id != nil {
		b = append(b, 1)
		b = appendString(b, id.Tenant)
		b = appendString(b, id.Principal)
		b = appendString(b, id.ConversationID)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Conversation.Messages)))
	for _, m := range r.Conversation.Messages {
		b = appendString(b, string(m.Role))
		b = appendString(b, m.Content)
		b = binary.AppendUvarint(b, uint64(len(m.ToolCalls)))
		for _, c := range m.ToolCalls {
			b = appendString(b, c.ID)
			b = appendString(b, c.Name)
			b = appendString(b, string(c.Args))
		}
		b = appendString(b, m.ToolCallID)
		b = appendString(b, m.ToolName)
		if m.IsError {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.Turns)))
	for _, t := range r.Turns {
		b = appendString(b, t.ID)
		b = binary.AppendUvarint(b, uint64(t.Messages))
	}
	if r.Pending != nil {
		p, err := json.Marshal(r.Pending)
		if err != nil {
			return nil, fmt.Errorf("native: encoding the pending turn: %w", err)
		}
		b = append(b, 1)
		b = appendString(b, string(p))
	} else {
		b = append(b, 0)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeRecord reads what encodeRecord wrote. Every length is checked
// against what is left, so a corrupt record is an error, never a panic
// or a huge allocation.
func decodeRecord(data []byte) (Record, error) {
	d := decoder{b: data}
	var r Record
	if d.uvarint() != recordEncoding {
		return Record{}, errCorruptRecord
	}
	r.Conversation.Version = int(d.uvarint())
	if d.flag() {
		r.Conversation.Identity = &tool.Identity{Tenant: d.string(), Principal: d.string(), ConversationID: d.string()}
	}
	if n := d.count(4); n > 0 {
		r.Conversation.Messages = make([]llm.Message, n)
		for i := range r.Conversation.Messages {
			m := &r.Conversation.Messages[i]
			m.Role = llm.Role(d.string())
			m.Content = d.string()
			if k := d.count(3); k > 0 {
				m.ToolCalls = make([]llm.ToolCall, k)
				for j := range m.ToolCalls {
					c := &m.ToolCalls[j]
					c.ID, c.Name = d.string(), d.string()
					if args := d.string(); args != "" {
						c.Args = json.RawMessage(args)
					}
				}
			}
			m.ToolCallID = d.string()
			m.ToolName = d.string()
			m.IsError = d.flag()
		}
	}
	if n := d.count(2); n > 0 {
		r.Turns = make([]TurnMark, n)
		for i := range r.Turns {
			r.Turns[i] = TurnMark{ID: d.string(), Messages: int(d.uvarint())}
		}
	}
	if d.flag() {
		p := new(PendingTurn)
		raw := d.string()
		if d.err == nil {
			if err := json.Unmarshal([]byte(raw), p); err != nil {
				return Record{}, errCorruptRecord
			}
			r.Pending = p
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return Record{}, errCorruptRecord
	}
	return r, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorruptRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items that take at least min bytes each.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.err = errCorruptRecord
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errCorruptRecord
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) flag() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 || d.b[0] > 1 {
		d.err = errCorruptRecord
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}
