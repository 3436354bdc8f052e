package host

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// CredentialKeySize is the size of a credentials key: AES-256.
const CredentialKeySize = 32

// maxKeyringKeys bounds the keys one key file holds.
const maxKeyringKeys = 64

// Keyring holds the keys people's credentials are sealed with at rest: the
// current one seals, and every one opens what was sealed under its id, so
// a key can be rotated without losing what an older key sealed.
type Keyring struct {
	current string
	aead    map[string]cipher.AEAD
}

// ParseKeyring reads a credentials key file: one key a line, "ID KEY",
// where ID is 1 to 32 letters, digits, '-' or '_' and KEY is 32 random
// bytes in standard base64 (head -c 32 /dev/urandom | base64). The
// first key seals; the ones after it only open what they sealed before.
// Blank lines and lines starting with '#' are skipped. The error never
// quotes a key.
func ParseKeyring(data []byte) (*Keyring, error) {
	k := &Keyring{aead: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1024), 4096)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("host: credentials key file line %d: write \"ID KEY\" (an id, a blank, 32 bytes in base64)", line)
		}
		id, enc := fields[0], fields[1]
		if !validKeyID(id) {
			return nil, fmt.Errorf("host: credentials key file line %d: a key id is 1 to 32 letters, digits, '-' or '_'", line)
		}
		if _, dup := k.aead[id]; dup {
			return nil, fmt.Errorf("host: credentials key file line %d: the key id %s is given twice; give each key its own id", line, id)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(key) != CredentialKeySize {
			return nil, fmt.Errorf("host: credentials key file line %d: the key is not %d bytes in base64; make one with: head -c 32 /dev/urandom | base64", line, CredentialKeySize)
		}
		if len(k.aead) == maxKeyringKeys {
			return nil, fmt.Errorf("host: the credentials key file holds more than %d keys; drop the old keys nothing is sealed under", maxKeyringKeys)
		}
		block, _ := aes.NewCipher(key) // a 32-byte key is always accepted
		aead, _ := cipher.NewGCM(block)
		k.aead[id] = aead
		if k.current == "" {
			k.current = id
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("host: credentials key file line %d is too long; write \"ID KEY\" a line", line+1)
	}
	if k.current == "" {
		return nil, errors.New("host: the credentials key file holds no key; add a line \"ID KEY\" (KEY: head -c 32 /dev/urandom | base64)")
	}
	return k, nil
}

// Current is the id of the key that seals.
func (k *Keyring) Current() string { return k.current }

func validKeyID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// credentialAAD binds a sealed credential to its owner, its name and its
// key id: a row copied to another person, or renamed, does not open.
func credentialAAD(owner ownerKey, name, keyID string) []byte {
	b := []byte("agentry-credential-v1")
	for _, s := range []string{owner.tenant, owner.principal, name, keyID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// ownerKey is who a credential belongs to.
type ownerKey struct{ tenant, principal string }

// seal encrypts secret for owner under the current key: the nonce
// followed by the ciphertext.
func (k *Keyring) seal(owner ownerKey, name string, secret []byte) (keyID string, sealed []byte) {
	aead := k.aead[k.current]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(secret)+aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	return k.current, aead.Seal(nonce, nonce, secret, credentialAAD(owner, name, k.current))
}

// Errors opening a sealed credential.
var (
	errUnknownCredKey = errors.New("host: the credential was sealed under a key serve was not given; add the old key to the credentials key file, or put the credential again")
	errBadSeal        = errors.New("host: the credential does not open with its key (it was altered, or belongs to another person); put it again")
)

// open decrypts what seal made for owner and name under keyID.
func (k *Keyring) open(owner ownerKey, name, keyID string, sealed []byte) ([]byte, error) {
	aead, ok := k.aead[keyID]
	if !ok {
		return nil, errUnknownCredKey
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, errBadSeal
	}
	n := aead.NonceSize()
	out, err := aead.Open(nil, sealed[:n], sealed[n:], credentialAAD(owner, name, keyID))
	if err != nil {
		return nil, errBadSeal
	}
	return out, nil
}
