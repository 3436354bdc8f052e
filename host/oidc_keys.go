package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The OpenID provider's signing keys (its JWKS): fetched from the
// discovered jwks_uri, kept for a bounded time, and fetched again when a
// token names a key not yet seen — at most once per refresh floor,
// whatever tokens arrive, so a flood of made-up key ids cannot turn into
// a flood of requests to the provider.

// Bounds on what is read from the provider.
const (
	maxJWKSBytes = 1 << 20
	maxJWKSKeys  = 100
	minRSABits   = 2048
)

// Why a signature could not be checked.
var (
	errUnknownKey = errors.New("the token names a signing key the provider does not publish")
	errBadSig     = errors.New("the token's signature does not verify")
)

// providerDown is a failure to reach the provider or read its keys. Its
// detail goes to the host's log, never to the caller.
type providerDown struct{ err error }

func (e *providerDown) Error() string { return "the provider's keys cannot be read: " + e.err.Error() }
func (e *providerDown) Unwrap() error { return e.err }

type keySet struct {
	url    string
	client *http.Client
	now    func() time.Time
	log    *slog.Logger // told of each fetch that fails
	// maxAge: keys older than this are fetched again before use (a key
	// the provider withdrew stops verifying within it). floor: the least
	// time between two fetches that are not due to age.
	maxAge, floor time.Duration

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time     // of the keys held; zero before the first
	tried   time.Time     // the last fetch began
	lastErr error         // of the last fetch, nil when it succeeded
	running chan struct{} // closed when the fetch in progress ends
}

// verify checks the signature of jws (already parsed with the allowed
// algorithms) with the provider's key it names, and returns its payload.
func (ks *keySet) verify(ctx context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	sig := jws.Signatures[0].Header
	keys, err := ks.current(ctx, false)
	if err != nil {
		return nil, err
	}
	cands := matching(keys, sig.KeyID, sig.Algorithm)
	if len(cands) == 0 && sig.KeyID != "" {
		// A key not seen yet: the provider may have rotated.
		if keys, err = ks.current(ctx, true); err != nil {
			return nil, err
		}
		cands = matching(keys, sig.KeyID, sig.Algorithm)
	}
	if len(cands) == 0 {
		return nil, errUnknownKey
	}
	for _, k := range cands {
		if payload, err := jws.Verify(k.Key); err == nil {
			return payload, nil
		}
	}
	return nil, errBadSig
}

// matching returns the keys that may have made a signature with alg and,
// when kid is set, that id.
func matching(keys []jose.JSONWebKey, kid, alg string) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == alg) {
			out = append(out, k)
		}
	}
	return out
}

// current returns the keys to verify with. Keys younger than maxAge are
// used as they are; with unknownKid (a token names a key not among them)
// they are fetched again, unless a fetch began within the floor. A fetch
// that failed is not tried again within the floor: its error stands.
// Concurrent callers share one fetch, run by the first of them.
func (ks *keySet) current(ctx context.Context, unknownKid bool) ([]jose.JSONWebKey, error) {
	for {
		ks.mu.Lock()
		now := ks.now()
		fresh := !ks.fetched.IsZero() && now.Sub(ks.fetched) < ks.maxAge
		recent := !ks.tried.IsZero() && now.Sub(ks.tried) < ks.floor
		switch {
		case ks.running != nil:
			wait := ks.running
			ks.mu.Unlock()
			select {
			case <-wait:
				unknownKid = false // that fetch is the one this caller needed
				continue
			case <-ctx.Done():
				return nil, &providerDown{ctx.Err()}
			}
		case fresh && !unknownKid:
			keys := ks.keys
			ks.mu.Unlock()
			return keys, nil
		case recent && ks.lastErr != nil:
			err := ks.lastErr
			ks.mu.Unlock()
			return nil, err
		case fresh && recent:
			keys := ks.keys // fetched within the floor: an unknown key stays unknown
			ks.mu.Unlock()
			return keys, nil
		}
		done := make(chan struct{})
		ks.running, ks.tried = done, now
		ks.mu.Unlock()

		keys, err := ks.fetch(ctx)

		ks.mu.Lock()
		ks.running, ks.lastErr = nil, err
		if err == nil {
			ks.keys, ks.fetched = keys, ks.now()
		}
		ks.mu.Unlock()
		close(done)
		if err != nil {
			ks.log.Warn("host: the OpenID provider's keys cannot be fetched; tokens that need them answer identity_unavailable until a fetch succeeds",
				"jwks_uri", ks.url, "retry_after", ks.floor, "err", err)
			return nil, err
		}
		return keys, nil
	}
}

// fetch reads the provider's JWKS: bounded in time (the client's timeout,
// and no caller's cancellation cuts it for the others), size and count.
func (ks *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout(ks.client))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ks.url, nil)
	if err != nil {
		return nil, &providerDown{err}
	}
	req.Header.Set("Accept", "application/json")
	res, err := ks.client.Do(req)
	if err != nil {
		return nil, &providerDown{err}
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, &providerDown{fmt.Errorf("GET %s answered %s", ks.url, res.Status)}
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, &providerDown{err}
	}
	if len(body) > maxJWKSBytes {
		return nil, &providerDown{fmt.Errorf("the key set at %s is larger than %d bytes", ks.url, maxJWKSBytes)}
	}
	keys, err := signingKeys(body)
	if err != nil {
		return nil, &providerDown{fmt.Errorf("the key set at %s: %w", ks.url, err)}
	}
	return keys, nil
}

// signingKeys reads a JWKS document and keeps the public signing keys of
// the kinds the allowed algorithms use. A key of another kind (a
// symmetric one above all: a public key set must never make HMAC
// signatures verifiable), for encryption, or too weak is left out; a key
// that cannot be read is left out rather than spoiling the rest.
func signingKeys(doc []byte) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(doc, &set); err != nil {
		return nil, fmt.Errorf("not a JSON key set: %w", err)
	}
	if len(set.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("%d keys, more than the %d this host reads", len(set.Keys), maxJWKSKeys)
	}
	var out []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil || (k.Use != "" && k.Use != "sig") {
			continue
		}
		if !k.IsPublic() {
			k = k.Public() // never hold a private part, even one published by mistake
		}
		switch pk := k.Key.(type) {
		case *rsa.PublicKey:
			if pk.N.BitLen() < minRSABits {
				continue
			}
		case *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			continue
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("no public signing key this host can use (RSA of 2048 bits or more, EC, or Ed25519)")
	}
	return out, nil
}

// fetchTimeout bounds one request to the provider.
func fetchTimeout(c *http.Client) time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return defaultOIDCTimeout
}
