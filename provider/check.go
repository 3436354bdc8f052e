package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"unicode"
	"unicode/utf8"
)

// Limits of the values the contract checks.
const (
	// MaxProviderKeyLen is the longest provider key, in characters.
	MaxProviderKeyLen = 100
	// MaxIDLen is the longest opaque id (session, turn, request, binding,
	// instance, invocation), in characters.
	MaxIDLen = 256
	// MaxWorkingDirectoryBytes is the longest working directory, in bytes.
	MaxWorkingDirectoryBytes = 4096
	// MaxConfigurationBytes bounds a session's or instance's configuration.
	MaxConfigurationBytes = 1 << 20
)

// CheckProviderKey reports whether s is a provider key: 1 to 100
// characters of a-z, 0-9, '.', '_' and '-', starting and ending with a
// letter or digit. The error does not quote s.
func CheckProviderKey(s string) error {
	switch {
	case s == "":
		return errors.New("the provider key is empty")
	case len(s) > MaxProviderKeyLen:
		return fmt.Errorf("the provider key is %d bytes; the limit is %d", len(s), MaxProviderKeyLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if alnum {
			continue
		}
		if c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("the provider key has a character outside a-z, 0-9, '.', '_' and '-' at byte %d", i)
		}
		if i == 0 || i == len(s)-1 {
			return errors.New("the provider key must start and end with a letter or digit")
		}
	}
	return nil
}

// CheckID reports whether s is an opaque id: 1 to 256 characters of valid
// UTF-8, no control characters, no leading or trailing white space. The
// error does not quote s.
func CheckID(s string) error {
	if s == "" {
		return errors.New("the id is empty")
	}
	if asciiID(s) {
		return nil
	}
	if len(s) > MaxIDLen*utf8.UTFMax {
		return fmt.Errorf("the id is longer than %d characters", MaxIDLen)
	}
	n := 0
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Errorf("the id is not valid UTF-8 at byte %d", i)
			}
		}
		if isControl(r) {
			return fmt.Errorf("the id has a control character at byte %d", i)
		}
		n++
	}
	if n > MaxIDLen {
		return fmt.Errorf("the id is %d characters; the limit is %d", n, MaxIDLen)
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return errors.New("the id starts or ends with white space")
	}
	return nil
}

// asciiID is the fast path of CheckID: an id of printable ASCII (no
// control characters, and ASCII has no format characters) that is short
// enough and does not start or end with a space is well-formed.
func asciiID(s string) bool {
	if len(s) > MaxIDLen || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// CheckWorkingDirectory reports whether dir can be a session's working
// directory: absolute, already clean (filepath.Clean leaves it unchanged),
// at most 4,096 bytes of valid UTF-8, no control characters. The host
// chooses it; passing this check authorises nothing. The error does not
// quote dir.
func CheckWorkingDirectory(dir string) error {
	switch {
	case dir == "":
		return errors.New("the working directory is empty")
	case len(dir) > MaxWorkingDirectoryBytes:
		return fmt.Errorf("the working directory is %d bytes; the limit is %d", len(dir), MaxWorkingDirectoryBytes)
	case !utf8.ValidString(dir):
		return errors.New("the working directory is not valid UTF-8")
	}
	for i, r := range dir {
		if r < utf8.RuneSelf && r >= 0x20 && r != 0x7f {
			continue
		}
		if isControl(r) {
			return fmt.Errorf("the working directory has a control character at byte %d", i)
		}
	}
	if !filepath.IsAbs(dir) {
		return errors.New("the working directory is not absolute")
	}
	if filepath.Clean(dir) != dir {
		return errors.New("the working directory is not clean (it has a trailing slash, '.', '..' or a doubled separator)")
	}
	return nil
}

// CheckConfiguration reports whether raw is an acceptable opaque
// configuration: empty, or one JSON object of at most 1 MiB.
func CheckConfiguration(raw json.RawMessage) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if len(raw) > MaxConfigurationBytes {
		return fmt.Errorf("the configuration is %d bytes; the limit is %d", len(raw), MaxConfigurationBytes)
	}
	return checkJSONObject(raw, "the configuration")
}

func checkJSONObject(raw json.RawMessage, what string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%s is not valid JSON", what)
	}
	if dec.More() {
		return fmt.Errorf("%s holds more than one JSON value", what)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("%s must be a JSON object", what)
	}
	return nil
}

// isControl is true for the C0 and C1 control characters and DEL, and for
// the Unicode format characters that reorder or hide text (bidi controls,
// zero-width joiners), which make an id display as another.
func isControl(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
