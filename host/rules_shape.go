package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// What a standing approval (a Rule) matches, besides its tool, its owner
// and (for a conversation's rule) its conversation:
//
//   - MatchAny: any arguments. Only a rule for one conversation may match
//     any arguments: "allow run_code here" is a person's word about this
//     conversation, never about every conversation they will have.
//   - MatchExact: exactly the arguments the person approved, compared as
//     JSON values (key order and spacing do not matter; every key, every
//     value and every type must be equal). For code this is the only
//     shape there is: a rule never allows "any code".
//   - MatchCommand: a command, given as the string or the list of strings
//     in the arguments' "command" field, whose words are plain (letters,
//     digits and ._/=:,@%+-: nothing a shell reads as syntax, no quotes,
//     no globs, no variables, no separators) and match the pattern word
//     for word: the pattern's first word is the program, literally; each
//     further word is a literal or "*", which stands for exactly one
//     plain word that does not begin with "-" (an operand, never an
//     option). The arguments may hold besides "command" only
//     "description" and "timeout"; any other key (a flag that changes how
//     the command runs) and the person is asked.
const (
	MatchAny     = "any"
	MatchExact   = "exact"
	MatchCommand = "command"
)

// Bounds of a rule's shape.
const (
	maxPatternBytes = 4 << 10
	maxCommandWords = 64
)

// commandExtras are the keys an argument object of a command may hold
// besides "command": words for a person, not for the shell.
var commandExtras = map[string]bool{"description": true, "timeout": true}

// plainWord reports whether w is a word no shell reads as syntax.
func plainWord(w string) bool {
	if w == "" {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._/=:,@%+-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// splitPlain splits a command line into plain words on spaces and tabs;
// ok is false when any word is not plain (or there are none, or too
// many).
func splitPlain(line string) ([]string, bool) {
	if len(line) > maxPatternBytes {
		return nil, false
	}
	words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 || len(words) > maxCommandWords {
		return nil, false
	}
	for _, w := range words {
		if !plainWord(w) {
			return nil, false
		}
	}
	return words, true
}

// ParseCommandPattern checks a command pattern and returns its words.
func ParseCommandPattern(p string) ([]string, error) {
	if len(p) > maxPatternBytes {
		return nil, fmt.Errorf("host: the command pattern is %d bytes; at most %d", len(p), maxPatternBytes)
	}
	words := strings.FieldsFunc(p, func(r rune) bool { return r == ' ' || r == '\t' })
	switch {
	case len(words) == 0:
		return nil, errors.New(`host: the command pattern is empty; give the program and its arguments ("git diff *")`)
	case len(words) > maxCommandWords:
		return nil, fmt.Errorf("host: the command pattern has %d words; at most %d", len(words), maxCommandWords)
	case words[0] == "*" || !plainWord(words[0]) || strings.HasPrefix(words[0], "-") || strings.Contains(words[0], "="):
		return nil, fmt.Errorf("host: the command pattern must begin with the program, literally (not %q)", words[0])
	}
	for _, w := range words[1:] {
		if w != "*" && !plainWord(w) {
			return nil, fmt.Errorf(`host: the command pattern's word %q is neither plain (letters, digits and ._/=:,@%%+-) nor "*"`, w)
		}
	}
	return words, nil
}

// commandOf reads the command an approval's arguments hold: their
// "command" field as a line or a list of words, every word plain, and no
// key but "command" and commandExtras. ok is false otherwise.
func commandOf(args json.RawMessage) ([]string, bool) {
	if len(args) == 0 || len(args) > MaxPendingArgs {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, false
	}
	raw, has := obj["command"]
	if !has {
		return nil, false
	}
	for k := range obj {
		if k != "command" && !commandExtras[k] {
			return nil, false
		}
	}
	var line string
	if err := json.Unmarshal(raw, &line); err == nil {
		return splitPlain(line)
	}
	var argv []string
	if err := json.Unmarshal(raw, &argv); err != nil || len(argv) == 0 || len(argv) > maxCommandWords {
		return nil, false
	}
	for _, w := range argv {
		if !plainWord(w) {
			return nil, false
		}
	}
	return argv, true
}

// matchCommand reports whether a command's words match a pattern's.
func matchCommand(pattern, words []string) bool {
	if len(pattern) == 0 || len(pattern) != len(words) {
		return false
	}
	if pattern[0] != words[0] {
		return false
	}
	for i := 1; i < len(pattern); i++ {
		switch p, w := pattern[i], words[i]; {
		case p == "*":
			if strings.HasPrefix(w, "-") {
				return false
			}
		case p != w:
			return false
		}
	}
	return true
}

// canonicalArgs is an argument object as one JSON text: keys sorted, no
// spaces, numbers as they were written. ok is false for anything that is
// not a JSON object within MaxPendingArgs.
func canonicalArgs(args json.RawMessage) ([]byte, bool) {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || len(args) > MaxPendingArgs || args[0] != '{' || !utf8.Valid(args) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	// Invalid text and lone surrogates decode to U+FFFD: two different
	// arguments could then read the same. Such arguments match nothing.
	if bytes.ContainsRune(b.Bytes(), utf8.RuneError) {
		return nil, false
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), true
}

// Matches reports whether the rule answers an approval of tool with args
// raised in conversation conv (the owner is the caller's to check).
func (r Rule) Matches(conv, tool string, args json.RawMessage) bool {
	if r.Tool != tool || (r.Conversation != "" && r.Conversation != conv) {
		return false
	}
	switch r.Match {
	case MatchAny:
		return r.Conversation != ""
	case MatchExact:
		c, ok := canonicalArgs(args)
		return ok && bytes.Equal(c, r.Args)
	case MatchCommand:
		p, err := ParseCommandPattern(r.Pattern)
		if err != nil {
			return false
		}
		words, ok := commandOf(args)
		return ok && matchCommand(p, words)
	}
	return false
}
