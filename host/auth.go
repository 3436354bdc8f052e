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
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/agentry-dev/agentry/tool"
)

// Authenticator proves who sends a request. It is the only source of a
// request's identity: nothing in a body or a client-controlled header
// can name a tenant, a principal or a role. Implementations must be safe
// for concurrent use. The host's authenticators are [Tokens] (a tokens
// file) and [OIDC] (bearer JWTs from an OpenID provider); a [Chain] puts
// them side by side.
type Authenticator interface {
	// Authenticate returns the caller the request's credentials prove
	// (an owner: a tenant and a principal, never a ConversationID; and a
	// role), or an error wrapping ErrNoCredentials (nothing presented),
	// ErrBadCredentials (presented and refused; a [*CredentialError]
	// says why) or ErrIdentityUnavailable (they cannot be checked now).
	Authenticate(r *http.Request) (Caller, error)
}

// Caller is who a request's credentials prove: the owner its
// conversations belong to, and what else it may do.
type Caller struct {
	tool.Identity
	// Role is RoleAdmin for an admin of the caller's tenant; empty for a
	// person, who reaches only their own conversations.
	Role Role `json:"role,omitempty"`
}

// Role is what a caller may do beyond its own conversations.
type Role string

// RoleAdmin: an admin of their tenant, who may read the metadata of the
// tenant's conversations (every principal's) and close them, and never
// another tenant's.
const RoleAdmin Role = "admin"

// AdminOf reports whether the caller is an admin of tenant: the one
// question every admin-only endpoint asks.
func (c Caller) AdminOf(tenant string) bool {
	return c.Role == RoleAdmin && tenant != "" && c.Tenant == tenant
}

var (
	// ErrNoCredentials: the request carries no Authorization header.
	ErrNoCredentials = errors.New("host: the request carries no credentials; send Authorization: Bearer <token>")
	// ErrBadCredentials: credentials were presented and not accepted.
	ErrBadCredentials = errors.New("host: the credentials were not accepted; send Authorization: Bearer <token> with a token this host knows")
	// ErrIdentityUnavailable: the credentials cannot be checked now (the
	// identity provider cannot be reached). It says nothing about them:
	// the caller should retry, not sign in again.
	ErrIdentityUnavailable error = unavailableError{}
)

type unavailableError struct{}

func (unavailableError) Error() string {
	return "host: the identity provider cannot be reached, so the credentials cannot be checked; retry shortly"
}

// IdentityUnavailable marks the error for doors that cannot import this
// package (mcpserve answers 503 to an error that has it).
func (unavailableError) IdentityUnavailable() bool { return true }

// CredentialError is a refusal of presented credentials that says why,
// with a stable code for the API's answer. Its message names what is
// wrong (a claim's name, the expected audience) and never repeats
// anything the token holds.
type CredentialError struct {
	Code    Code
	Message string
}

func (e *CredentialError) Error() string { return e.Message }

// Unwrap makes every CredentialError an ErrBadCredentials.
func (e *CredentialError) Unwrap() error { return ErrBadCredentials }

// Chain is the host's one authenticator when several are configured:
// each link reads the same bearer token, in order, and the first that
// proves the caller wins (a tokens file first: its check is local and in
// constant time). When none does, the refusal that says most is
// returned: identity unavailable, then a coded refusal, then a plain one.
type Chain []Authenticator

// Authenticate asks each link in turn.
func (c Chain) Authenticate(r *http.Request) (Caller, error) {
	var refused error
	for _, a := range c {
		who, err := a.Authenticate(r)
		if err == nil {
			return who, nil
		}
		if errors.Is(err, ErrNoCredentials) {
			return Caller{}, err // every link reads the same header
		}
		if refused == nil || says(err) > says(refused) {
			refused = err
		}
	}
	if refused == nil {
		return Caller{}, ErrNoCredentials
	}
	return Caller{}, refused
}

// says ranks a refusal by how much it tells the caller.
func says(err error) int {
	var ce *CredentialError
	switch {
	case errors.Is(err, ErrIdentityUnavailable):
		return 3
	case errors.As(err, &ce) && ce.Code != CodeInvalidToken:
		return 2
	}
	return 1
}

// Identity is Authenticate in the shape the MCP door takes
// (mcpserve.Authenticator): (nil, nil) for a request with no credentials,
// the proved identity, or the refusal (ErrIdentityUnavailable included,
// which the door answers with 503).
func (c Chain) Identity(r *http.Request) (*tool.Identity, error) {
	who, err := c.Authenticate(r)
	switch {
	case errors.Is(err, ErrNoCredentials):
		return nil, nil
	case err != nil:
		return nil, err
	}
	id := who.Identity
	return &id, nil
}

// Tokens is the default Authenticator: bearer tokens, each proving one
// caller (an owner, and the admin role when its line says so). It keeps
// only the tokens' SHA-256 digests. It is the one tokens
// parser and authenticator of agentry: the MCP door uses it too, through
// a [Chain] ([Chain.Identity]).
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	sum [sha256.Size]byte
	who Caller
	// created and expires are the line's created= and expires=
	// attributes; zero when absent (a token without expires= does not
	// expire).
	created, expires time.Time
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
//	sha256:<64 hex digits of the token's SHA-256> <tenant> <principal> [key=value ...]
//
// Blank lines and lines starting with # are ignored. Tokens themselves
// never appear in the file. Tenants and principals are 1–128 printable
// characters without spaces. A digest listed twice is refused. After the
// three fields a line may carry attributes, each key=value and each at
// most once:
//
//	role=admin           the token's owner is an admin of its tenant (RoleAdmin)
//	created=<RFC 3339>   when the token was made (shown by agentry token list)
//	expires=<RFC 3339>   the token is refused from this instant on (token_expired)
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
		e, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("host: tokens file line %d: %w", n, err)
		}
		if seen[e.sum] {
			return nil, fmt.Errorf("host: tokens file line %d: this digest is listed twice; remove one line", n)
		}
		seen[e.sum] = true
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("host: tokens file line %d is too long", n+1)
		}
		return nil, fmt.Errorf("host: reading the tokens file: %w", err)
	}
	return t, nil
}

// parseTokenLine reads one line that is not blank or a comment.
func parseTokenLine(line string) (tokenEntry, error) {
	var e tokenEntry
	f := strings.Fields(line)
	if len(f) < 3 {
		return e, fmt.Errorf("want \"sha256:<hex digest> <tenant> <principal> [key=value ...]\", found %d fields", len(f))
	}
	hexSum, ok := strings.CutPrefix(f[0], "sha256:")
	if !ok {
		return e, errors.New("the first field must be sha256:<hex digest of the token>; tokens are never stored in the file (agentry token prints a line)")
	}
	if len(hexSum) != hex.EncodedLen(sha256.Size) {
		return e, fmt.Errorf("the digest must be %d hex digits", hex.EncodedLen(sha256.Size))
	}
	if _, err := hex.Decode(e.sum[:], []byte(hexSum)); err != nil {
		return e, errors.New("the digest is not hex")
	}
	e.who.Identity = tool.Identity{Tenant: f[1], Principal: f[2]}
	if err := checkName("tenant", e.who.Tenant); err != nil {
		return e, err
	}
	if err := checkName("principal", e.who.Principal); err != nil {
		return e, err
	}
	given := map[string]bool{}
	for _, kv := range f[3:] {
		k, v, ok := strings.Cut(kv, "=")
		set, known := tokenAttrs[k]
		switch {
		case !ok || k == "":
			return e, fmt.Errorf("%q after the principal is not an attribute; attributes are key=value (%s)", clip(kv), attrKeys())
		case !known:
			return e, fmt.Errorf("unknown attribute %q; the attributes are %s", clip(k), attrKeys())
		case given[k]:
			return e, fmt.Errorf("the attribute %s is given twice; keep one", k)
		}
		given[k] = true
		if err := set(&e, v); err != nil {
			return e, fmt.Errorf("%s=: %w", k, err)
		}
	}
	return e, nil
}

// tokenAttrs are the attributes a tokens file line may carry, each with
// what it sets on the line's entry.
var tokenAttrs = map[string]func(e *tokenEntry, v string) error{
	"role": func(e *tokenEntry, v string) error {
		if Role(v) != RoleAdmin {
			return fmt.Errorf("the one role is %s (an admin of the tenant); leave role out for a person", RoleAdmin)
		}
		e.who.Role = RoleAdmin
		return nil
	},
	"created": func(e *tokenEntry, v string) error { return parseStamp(&e.created, v) },
	"expires": func(e *tokenEntry, v string) error { return parseStamp(&e.expires, v) },
}

// parseStamp reads an RFC 3339 instant (2026-12-31T00:00:00Z).
func parseStamp(dst *time.Time, v string) error {
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return fmt.Errorf("%q is not an RFC 3339 time; write it as 2026-12-31T00:00:00Z", clip(v))
	}
	*dst = at.UTC()
	return nil
}

func attrKeys() string {
	keys := make([]string, 0, len(tokenAttrs))
	for k := range tokenAttrs {
		keys = append(keys, k+"=")
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// clip shortens what a refusal quotes from a file, so a long field (a
// token pasted by mistake, say) is not repeated whole.
func clip(s string) string {
	if len(s) > 16 {
		return s[:8] + "…"
	}
	return s
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
		if !seen[e.who.Identity] {
			seen[e.who.Identity] = true
			out = append(out, e.who.Identity)
		}
	}
	return out
}

// Authenticate reads Authorization: Bearer <token>. The token's SHA-256
// digest is compared with every admitted digest in constant time, with no
// early exit, so how long it takes says nothing about which token came
// close, or where in the file it is. A token past its expires= is refused
// with CodeTokenExpired.
func (t *Tokens) Authenticate(r *http.Request) (Caller, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return Caller{}, err
	}
	sum := sha256.Sum256([]byte(tok))
	var found Caller
	var expires time.Time
	match := 0
	for i := range t.entries {
		if subtle.ConstantTimeCompare(t.entries[i].sum[:], sum[:]) == 1 {
			found, expires = t.entries[i].who, t.entries[i].expires
			match = 1
		}
	}
	if match == 0 {
		return Caller{}, ErrBadCredentials
	}
	if !expires.IsZero() && !time.Now().Before(expires) {
		return Caller{}, &CredentialError{Code: CodeTokenExpired,
			Message: "host: this token expired at " + expires.Format(time.RFC3339) + "; ask the operator for a new one (agentry token --expires)"}
	}
	return found, nil
}

// bearerToken reads the request's one Authorization header as a bearer
// token: ErrNoCredentials without one, ErrBadCredentials for two, another
// scheme, or a malformed token.
func bearerToken(r *http.Request) (string, error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return "", ErrNoCredentials
	}
	if len(h) > 1 {
		return "", ErrBadCredentials
	}
	tok, ok := bearer(h[0])
	if !ok {
		return "", ErrBadCredentials
	}
	return tok, nil
}

// maxBearer bounds a bearer token: room for a JWT with a long list of
// groups, and no more.
const maxBearer = 16 << 10

// bearer reads the token of an Authorization value "Bearer <token>" (the
// scheme in any case).
func bearer(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" || len(tok) > maxBearer || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
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
