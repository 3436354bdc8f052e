package host

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"unicode"

	"github.com/agentry-dev/agentry/tool"
)

// Authenticator proves who sends a request. It is the only source of a
// request's identity: nothing in a body or a client-controlled header
// can name a tenant or principal. Implementations must be safe for
// concurrent use; a JWT or OIDC verifier fits behind it.
type Authenticator interface {
	// Authenticate returns the owner the request's credentials prove (a
	// tenant and a principal; never a ConversationID), or
	// an error wrapping ErrNoCredentials (nothing presented) or
	// ErrBadCredentials (presented and refused).
	Authenticate(r *http.Request) (tool.Identity, error)
}

var (
	// ErrNoCredentials: the request carries no Authorization header.
	ErrNoCredentials = errors.New("host: the request carries no credentials; send Authorization: Bearer <token>")
	// ErrBadCredentials: credentials were presented and not accepted.
	ErrBadCredentials = errors.New("host: the credentials were not accepted; send Authorization: Bearer <token> with a token this host knows")
)

// Tokens is the default Authenticator: bearer tokens, each proving one
// owner. It keeps only the tokens' SHA-256 digests. It is the one tokens
// parser and authenticator of agentry: the MCP door uses it too
// ([Tokens.Identity]).
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	sum   [sha256.Size]byte
	owner tool.Identity
}

// TokenPrefix starts every token GenerateToken makes, so a leaked token is
// easy to recognise (and to scan for).
const TokenPrefix = "agt_"

// GenerateToken returns a new random token (256 bits) and its digest line
// for a tokens file.
func GenerateToken(o tool.Identity) (token, line string, err error) {
	if err := checkName("tenant", o.Tenant); err != nil {
		return "", "", err
	}
	if err := checkName("principal", o.Principal); err != nil {
		return "", "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("host: generating a token: %w", err)
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, TokenLine(token, o), nil
}

// TokenLine is the line of a tokens file that admits token as o.
func TokenLine(token string, o tool.Identity) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:]) + " " + o.Tenant + " " + o.Principal
}

// ParseTokens reads a tokens file: one token a line, as
//
//	sha256:<64 hex digits of the token's SHA-256> <tenant> <principal>
//
// Blank lines and lines starting with # are ignored. Tokens themselves
// never appear in the file. Tenants and principals are 1–128 printable
// characters without spaces. A digest listed twice is refused.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := make(map[[sha256.Size]byte]bool)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("host: tokens file line %d: want \"sha256:<hex digest> <tenant> <principal>\", found %d fields", n, len(f))
		}
		hexSum, ok := strings.CutPrefix(f[0], "sha256:")
		if !ok {
			return nil, fmt.Errorf("host: tokens file line %d: the first field must be sha256:<hex digest of the token>; tokens are never stored in the file (agentry token prints a line)", n)
		}
		var sum [sha256.Size]byte
		if len(hexSum) != hex.EncodedLen(sha256.Size) {
			return nil, fmt.Errorf("host: tokens file line %d: the digest must be %d hex digits", n, hex.EncodedLen(sha256.Size))
		}
		if _, err := hex.Decode(sum[:], []byte(hexSum)); err != nil {
			return nil, fmt.Errorf("host: tokens file line %d: the digest is not hex", n)
		}
		o := tool.Identity{Tenant: f[1], Principal: f[2]}
		if err := checkName("tenant", o.Tenant); err != nil {
			return nil, fmt.Errorf("host: tokens file line %d: %w", n, err)
		}
		if err := checkName("principal", o.Principal); err != nil {
			return nil, fmt.Errorf("host: tokens file line %d: %w", n, err)
		}
		if seen[sum] {
			return nil, fmt.Errorf("host: tokens file line %d: this digest is listed twice; remove one line", n)
		}
		seen[sum] = true
		t.entries = append(t.entries, tokenEntry{sum: sum, owner: o})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("host: tokens file line %d is too long", n+1)
		}
		return nil, fmt.Errorf("host: reading the tokens file: %w", err)
	}
	return t, nil
}

// LoadTokens reads a tokens file from disk (see ParseTokens).
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("host: reading the tokens file: %w", err)
	}
	return ParseTokens(bytes.NewReader(b))
}

// Len returns how many tokens are admitted.
func (t *Tokens) Len() int { return len(t.entries) }

// Owners returns the distinct owners the tokens admit, in file order.
func (t *Tokens) Owners() []tool.Identity {
	var out []tool.Identity
	seen := map[tool.Identity]bool{}
	for _, e := range t.entries {
		if !seen[e.owner] {
			seen[e.owner] = true
			out = append(out, e.owner)
		}
	}
	return out
}

// Authenticate reads Authorization: Bearer <token>. The token's SHA-256
// digest is compared with every admitted digest in constant time, with no
// early exit, so how long it takes says nothing about which token came
// close, or where in the file it is.
func (t *Tokens) Authenticate(r *http.Request) (tool.Identity, error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return tool.Identity{}, ErrNoCredentials
	}
	if len(h) > 1 {
		return tool.Identity{}, ErrBadCredentials
	}
	tok, ok := bearer(h[0])
	if !ok {
		return tool.Identity{}, ErrBadCredentials
	}
	sum := sha256.Sum256([]byte(tok))
	var found tool.Identity
	match := 0
	for i := range t.entries {
		if subtle.ConstantTimeCompare(t.entries[i].sum[:], sum[:]) == 1 {
			found = t.entries[i].owner
			match = 1
		}
	}
	if match == 0 {
		return tool.Identity{}, ErrBadCredentials
	}
	return found, nil
}

// Identity is Authenticate in the shape the MCP door takes
// (mcpserve.Authenticator): (nil, nil) for a request with no credentials,
// the proved identity, or an error wrapping ErrBadCredentials.
func (t *Tokens) Identity(r *http.Request) (*tool.Identity, error) {
	id, err := t.Authenticate(r)
	switch {
	case errors.Is(err, ErrNoCredentials):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &id, nil
}

// bearer reads the token of an Authorization value "Bearer <token>" (the
// scheme in any case).
func bearer(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" || len(tok) > 4096 || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", false
	}
	return tok, true
}

// checkName accepts 1–128 printable characters without spaces.
func checkName(what, s string) error {
	if s == "" || len(s) > 128 {
		return fmt.Errorf("host: a %s must be 1 to 128 characters", what)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return fmt.Errorf("host: a %s must be printable characters without spaces", what)
	}
	return nil
}
