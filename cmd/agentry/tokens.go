package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"unicode"

	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
)

// tokenDigests is a tokens file read into memory: the SHA-256 digest of
// each admitted bearer token and the identity it proves. The tokens
// themselves are never in the file, nor here.
//
// The file format is the one agentry serve reads (docs/host.md), so one
// file serves both doors:
//
//	# comment
//	sha256:<64 hex digits of the token's SHA-256> <tenant> <principal>
//
// Blank lines and lines starting with # are ignored; tenants and
// principals are 1–128 printable characters without spaces; a digest
// listed twice is refused.
type tokenDigests map[[sha256.Size]byte]tool.Identity

const maxTokenLine = 4096

// parseTokenFile reads a tokens file. Its errors name the line and the
// fix, and never quote the line (it could hold a pasted token).
func parseTokenFile(r io.Reader) (tokenDigests, error) {
	t := tokenDigests{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxTokenLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("tokens file line %d: want \"sha256:<hex digest> <tenant> <principal>\", found %d fields", n, len(f))
		}
		digest, ok := strings.CutPrefix(f[0], "sha256:")
		if !ok {
			return nil, fmt.Errorf("tokens file line %d: the first field must be sha256:<hex digest of the token>; the file never holds a token itself", n)
		}
		var sum [sha256.Size]byte
		if len(digest) != hex.EncodedLen(sha256.Size) {
			return nil, fmt.Errorf("tokens file line %d: the digest must be %d hex digits", n, hex.EncodedLen(sha256.Size))
		}
		if _, err := hex.Decode(sum[:], []byte(digest)); err != nil {
			return nil, fmt.Errorf("tokens file line %d: the digest is not hex", n)
		}
		for i, what := range []string{"tenant", "principal"} {
			if err := checkOwnerName(f[1+i]); err != nil {
				return nil, fmt.Errorf("tokens file line %d: the %s %w", n, what, err)
			}
		}
		if _, dup := t[sum]; dup {
			return nil, fmt.Errorf("tokens file line %d: this digest is listed twice; remove one of the lines", n)
		}
		t[sum] = tool.Identity{Tenant: f[1], Principal: f[2]}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("tokens file line %d is longer than %d bytes", n+1, maxTokenLine)
		}
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	return t, nil
}

// checkOwnerName accepts 1–128 printable characters without spaces.
func checkOwnerName(s string) error {
	if s == "" || len(s) > 128 {
		return errors.New("must be 1 to 128 characters")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return errors.New("must be printable characters without spaces")
	}
	return nil
}

// loadTokenFile reads a tokens file from disk.
func loadTokenFile(path string) (tokenDigests, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	return parseTokenFile(bytes.NewReader(b))
}

// tokenLine is the tokens-file line that admits token as id.
func tokenLine(token string, id tool.Identity) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:]) + " " + id.Tenant + " " + id.Principal
}

// authenticator proves callers by their bearer token: no Authorization
// header is no credentials; a token whose digest is listed proves its
// identity; anything else is refused. The token is hashed, looked up by
// digest (whose timing tells nothing about any admitted token), and the
// digests compared in constant time.
func (t tokenDigests) authenticator() mcpserve.Authenticator {
	return func(r *http.Request) (*tool.Identity, error) {
		h := r.Header.Values("Authorization")
		switch {
		case len(h) == 0:
			return nil, nil
		case len(h) > 1:
			return nil, mcpserve.ErrBadCredentials
		}
		tok, ok := mcpserve.BearerToken(h[0])
		if !ok || len(tok) > maxTokenLine {
			return nil, mcpserve.ErrBadCredentials
		}
		sum := sha256.Sum256([]byte(tok))
		id, found := t[sum]
		var want [sha256.Size]byte
		if found {
			want = sum
		}
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !found {
			return nil, mcpserve.ErrBadCredentials
		}
		return &id, nil
	}
}
