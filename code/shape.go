package code

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ShapeHash digests the shape of a piece of code: comments and literals
// (strings, numbers) are dropped, variable names become one placeholder,
// and keywords, operators and the names of what is called are kept. Two
// programs that differ only in their data or in what they call their
// variables hash alike; the digest cannot be turned back into the code,
// which quotes the data it works on. It is 12 hex characters.
//
// language selects the notion of "what is called": a name followed by "("
// for every language, and also a command word at the start of a command
// for shells (bash, sh).
func ShapeHash(language, src string) string {
	h := sha256.New()
	shell := isShell(language)
	lx := lexer{src: src, shell: shell}
	first := true
	for {
		tok, ok := lx.next()
		if !ok {
			break
		}
		if !first {
			h.Write([]byte{' '})
		}
		first = false
		h.Write([]byte(tok))
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:6])
}

func isShell(language string) bool {
	switch strings.ToLower(language) {
	case "bash", "sh", "shell", "zsh", "dash":
		return true
	}
	return false
}

// lexer splits code into shape tokens. It never fails: whatever it cannot
// classify is an operator of one character.
type lexer struct {
	src   string
	pos   int
	shell bool
	// command is true where a shell expects a command word.
	command bool
	started bool
}

const (
	tokLiteral = "L" // any string or number
	tokName    = "v" // any variable name
)

var keywords = map[string]bool{
	// Python
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
	"match": true, "case": true,
	// shells
	"then": true, "fi": true, "do": true, "done": true, "esac": true, "function": true, "until": true,
	"select": true, "time": true, "local": true, "export": true,
}

// shellCommandStarters are keywords after which a shell expects a command.
var shellCommandStarters = map[string]bool{
	"then": true, "do": true, "else": true, "if": true, "elif": true, "while": true, "until": true,
	"time": true, "!": true,
}

var stringPrefixes = map[string]bool{
	"r": true, "u": true, "b": true, "f": true, "br": true, "rb": true, "fr": true, "rf": true,
}

func (l *lexer) next() (string, bool) {
	if !l.started {
		l.started = true
		l.command = true
	}
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\n' || c == ';':
			l.pos++
			if l.shell {
				l.command = true
			}
			if c == ';' {
				return ";", true
			}
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			l.pos++
			continue
		case c == '#' && l.isComment():
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
			continue
		case c == '"' || c == '\'' || c == '`':
			l.skipString()
			l.command = false
			return tokLiteral, true
		case c >= '0' && c <= '9' || c == '.' && l.pos+1 < len(l.src) && isDigit(l.src[l.pos+1]):
			start := l.pos
			l.pos++
			hex := strings.HasPrefix(strings.ToLower(l.src[start:min(start+2, len(l.src))]), "0x")
			for l.pos < len(l.src) {
				b := l.src[l.pos]
				exp := (b == '+' || b == '-') && !hex && (l.src[l.pos-1] == 'e' || l.src[l.pos-1] == 'E')
				if !isWordByte(b) && b != '.' && !exp {
					break
				}
				l.pos++
			}
			l.command = false
			return tokLiteral, true
		}
		r, size := utf8.DecodeRuneInString(l.src[l.pos:])
		if r == '_' || unicode.IsLetter(r) {
			return l.word(), true
		}
		l.pos += size
		op := string(r)
		if r == utf8.RuneError && size == 1 {
			op = "?"
		}
		if l.shell {
			// After these a shell expects a command word.
			l.command = strings.ContainsRune("|&({`!", r) || (r == '$' && l.pos < len(l.src) && l.src[l.pos] == '(')
		}
		return op, true
	}
	return "", false
}

// isComment: "#" starts a comment, except inside a shell word ("$#",
// "${#a[@]}").
func (l *lexer) isComment() bool {
	if !l.shell || l.pos == 0 {
		return true
	}
	prev := l.src[l.pos-1]
	return prev == ' ' || prev == '\t' || prev == '\n' || prev == ';'
}

func (l *lexer) word() string {
	start := l.pos
	for l.pos < len(l.src) {
		r, size := utf8.DecodeRuneInString(l.src[l.pos:])
		if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			break
		}
		l.pos += size
	}
	w := l.src[start:l.pos]
	// A string prefix glued to a quote is part of the literal: f"..{x}..".
	if l.pos < len(l.src) && (l.src[l.pos] == '"' || l.src[l.pos] == '\'') && stringPrefixes[strings.ToLower(w)] {
		l.skipString()
		l.command = false
		return tokLiteral
	}
	command := l.command
	l.command = false
	if keywords[w] {
		if l.shell && shellCommandStarters[w] {
			l.command = true
		}
		return w
	}
	if command && l.shell {
		return w
	}
	// What is called keeps its name: f(...), obj.method(...).
	for i := l.pos; i < len(l.src); i++ {
		switch l.src[i] {
		case ' ', '\t':
			continue
		case '(':
			return w
		}
		break
	}
	return tokName
}

// skipString moves past a string literal starting at l.pos: single, double
// or back quotes, Python's triple quotes, backslash escapes. An unclosed
// literal runs to the end of the code.
func (l *lexer) skipString() {
	q := l.src[l.pos]
	if q != '`' && strings.HasPrefix(l.src[l.pos:], strings.Repeat(string(q), 3)) {
		end := strings.Repeat(string(q), 3)
		i := l.pos + 3
		for i < len(l.src) {
			if l.src[i] == '\\' {
				i += 2
				continue
			}
			if strings.HasPrefix(l.src[i:], end) {
				l.pos = i + 3
				return
			}
			i++
		}
		l.pos = len(l.src)
		return
	}
	i := l.pos + 1
	for i < len(l.src) {
		switch l.src[i] {
		case '\\':
			if q == '\'' && l.shell {
				// Shell single quotes have no escapes.
				i++
				continue
			}
			i += 2
			continue
		case q:
			l.pos = i + 1
			return
		case '\n':
			if !l.shell && q != '`' {
				// Python strings end at the line; treat the rest as code.
				l.pos = i
				return
			}
		}
		i++
	}
	l.pos = len(l.src)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
