package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// ANSI colours, used only when Format is asked for colour.
const (
	reset   = "\x1b[0m"
	dim     = "\x1b[2m"
	red     = "\x1b[31m"
	green   = "\x1b[32m"
	yellow  = "\x1b[33m"
	blue    = "\x1b[34m"
	magenta = "\x1b[35m"
	cyan    = "\x1b[36m"
	bold    = "\x1b[1m"
)

// Format renders one event as one readable line: time, type without the
// "agentry." prefix, run and session, then the payload's fields as
// key=value in their JSON order. False booleans and empty strings are left
// out. With color, the type is coloured by kind and failures stand out.
func Format(e event.Event, color bool) string {
	var b strings.Builder
	ts := "--:--:--.---"
	if !e.Meta.Time.IsZero() {
		ts = e.Meta.Time.UTC().Format("15:04:05.000")
	}
	name := quote(strings.TrimPrefix(string(e.Type), "agentry."))
	paint := func(code, s string) {
		if color {
			b.WriteString(code)
			b.WriteString(s)
			b.WriteString(reset)
			return
		}
		b.WriteString(s)
	}
	paint(dim, ts)
	b.WriteByte(' ')
	paint(colorOf(e), fmt.Sprintf("%-28s", name))
	field := func(k, v string) {
		b.WriteByte(' ')
		paint(dim, k+"=")
		b.WriteString(v)
	}
	if e.Meta.RunID != "" {
		field("run", quote(e.Meta.RunID))
	}
	if e.Meta.SessionID != "" {
		field("session", quote(e.Meta.SessionID))
	}
	for _, kv := range payloadFields(e.Payload) {
		if kv[0] == "error" && color {
			b.WriteByte(' ')
			paint(red, "error="+kv[1])
			continue
		}
		field(kv[0], kv[1])
	}
	return b.String()
}

func colorOf(e event.Event) string {
	t := string(e.Type)
	switch {
	case e.Type.Domain() == "error", strings.Contains(t, "failed"), strings.Contains(t, "refused"), strings.Contains(t, "quarantined"):
		return bold + red
	case e.Type == event.TypeTurnEnd:
		if p, ok := e.Payload.(*event.TurnEnd); ok && p.Outcome == event.OutcomeError {
			return bold + red
		}
		return bold + yellow
	case e.Type.Domain() == "agent", e.Type.Domain() == "pause":
		return bold + yellow
	case e.Type.Domain() == "llm":
		return blue
	case e.Type.Domain() == "tool":
		if p, ok := e.Payload.(*tool.CallEnd); ok && p.IsError {
			return red
		}
		return magenta
	case e.Type == tool.TypeSessionClosed:
		return green
	case e.Type.Domain() == "tools":
		return cyan
	}
	return ""
}

// payloadFields lists the payload's top-level JSON fields in order, with
// values rendered for reading.
func payloadFields(p any) [][2]string {
	raw, err := json.Marshal(p)
	if err != nil {
		return [][2]string{{"payload", "(unserialisable)"}}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		if len(raw) == 0 || string(raw) == "null" {
			return nil
		}
		return [][2]string{{"payload", string(raw)}}
	}
	var out [][2]string
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		k, _ := kt.(string)
		var rendered string
		switch {
		case string(v) == "false", string(v) == `""`, string(v) == "null":
			continue
		case len(v) > 0 && v[0] == '"':
			var s string
			_ = json.Unmarshal(v, &s)
			rendered = quote(s)
		default:
			rendered = string(v)
		}
		out = append(out, [2]string{k, rendered})
	}
	return out
}

// Printable returns s unchanged when it is a plain word, and quoted (Go
// syntax) when it holds spaces, quotes, '=' or anything a terminal would
// interpret. Use it for every string read from a file before printing it.
func Printable(s string) string { return quote(s) }

// quote leaves a plain word bare and quotes anything with spaces, quotes,
// control characters or '='.
func quote(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r <= ' ' || r == '"' || r == '=' || r == '\\' || r == 0x7f || r > 0x7e && !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
