package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Defaults for a zero OIDCConfig.
const (
	DefaultOIDCLeeway       = 30 * time.Second
	DefaultOIDCKeysMaxAge   = 10 * time.Minute
	DefaultOIDCRefreshFloor = 10 * time.Second
	DefaultOIDCAdminRole    = "agentry-admin"
	defaultOIDCTimeout      = 10 * time.Second
)

// oidcAlgorithms are the signature algorithms a token may use: public-key
// ones only. "none" is never among them, nor any HMAC (a verifier that
// took HS256 with the provider's public key as the secret would accept
// tokens anyone can make).
var oidcAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// oidcAlgorithmNames lists them for a refusal.
var oidcAlgorithmNames = func() string {
	names := make([]string, len(oidcAlgorithms))
	for i, a := range oidcAlgorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}()

// OIDCConfig configures [NewOIDC]: which provider issues the tokens, which
// service they must be meant for, and which claims say who the caller is.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL, exactly as its discovery
	// document (Issuer + "/.well-known/openid-configuration") names it.
	// It must be https, except on a loopback address.
	Issuer string
	// Audience is the value the token's aud claim must hold: this
	// service's identifier at the provider.
	Audience string
	// TenantClaim names the claim holding the caller's tenant. Leave it
	// empty to put every caller in Tenant. (A claim name with dots that
	// the token does not hold as such, here and below, is read as a path
	// into nested objects: "realm_access.roles".)
	TenantClaim string
	// Tenant is the one tenant of every caller when TenantClaim is empty.
	Tenant string
	// PrincipalClaim names the claim holding the caller's principal
	// (default "sub").
	PrincipalClaim string
	// RolesClaim names the claim (a string or a list of strings) that
	// makes a caller an admin of their tenant when it holds AdminRole
	// (default "agentry-admin"). Empty: every caller is a person.
	RolesClaim, AdminRole string

	// ClientID is the console's client at the provider, a public client
	// (no secret) that signs people in with the authorization code flow
	// and PKCE. Empty: the console signs in with pasted tokens only.
	ClientID string
	// Scopes the console asks for (default "openid").
	Scopes []string

	// Leeway is the clock skew allowed on exp, nbf and iat (default 30s).
	Leeway time.Duration
	// KeysMaxAge is how long the provider's keys are used before they are
	// fetched again (default 10m); RefreshFloor is the least time between
	// two fetches a token with an unknown key id may cause (default 10s).
	KeysMaxAge, RefreshFloor time.Duration
	// HTTPClient reaches the provider (default: a client with a 10s
	// timeout).
	HTTPClient *http.Client
	// Now is the clock tokens are judged by (default time.Now).
	Now func() time.Time
	// Logger hears why the provider could not be reached (callers are
	// told only that it could not).
	Logger *slog.Logger
}

// OIDC is an [Authenticator] for bearer JWTs an OpenID provider issues
// (access tokens in the JWT format of RFC 9068, or any JWT the provider
// signs): the signature with the provider's published keys, then iss,
// aud, exp, nbf and iat (with a small leeway), then the caller from the
// configured claims. A token that fails says why with a stable code; a
// provider that cannot be reached when its keys are needed is
// ErrIdentityUnavailable, never a refusal. Safe for concurrent use.
type OIDC struct {
	cfg      OIDCConfig
	keys     *keySet
	authURL  string
	tokenURL string
}

// NewOIDC discovers the provider (its discovery document, then its keys)
// and returns the authenticator. It refuses a configuration that cannot
// work, naming the fix, and fails when the provider cannot be reached.
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, cfg.HTTPClient), fetchTimeout(cfg.HTTPClient))
	defer cancel()
	p, err := oidc.NewProvider(dctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("host: discovering the OpenID provider %s: %w (is --oidc-issuer the provider's issuer, exactly as its discovery document names it?)", cfg.Issuer, err)
	}
	var doc struct {
		JWKS string `json:"jwks_uri"`
	}
	if err := p.Claims(&doc); err != nil || doc.JWKS == "" {
		return nil, fmt.Errorf("host: the OpenID provider %s names no jwks_uri in its discovery document", cfg.Issuer)
	}
	o := &OIDC{cfg: cfg, authURL: p.Endpoint().AuthURL, tokenURL: p.Endpoint().TokenURL}
	for _, u := range []struct{ name, url string }{{"jwks_uri", doc.JWKS}, {"authorization_endpoint", o.authURL}, {"token_endpoint", o.tokenURL}} {
		if u.url == "" && u.name != "jwks_uri" && cfg.ClientID == "" {
			continue // the console's sign-in needs them; the API does not
		}
		if err := checkProviderURL(u.name, u.url); err != nil {
			return nil, fmt.Errorf("host: the OpenID provider %s: %w", cfg.Issuer, err)
		}
	}
	o.keys = &keySet{url: doc.JWKS, client: cfg.HTTPClient, now: cfg.Now, log: cfg.Logger, maxAge: cfg.KeysMaxAge, floor: cfg.RefreshFloor}
	if _, err := o.keys.current(ctx, false); err != nil {
		return nil, fmt.Errorf("host: reading the OpenID provider's keys: %w", err)
	}
	return o, nil
}

// check fills the defaults in and refuses what cannot work.
func (c *OIDCConfig) check() error {
	if err := checkProviderURL("--oidc-issuer", c.Issuer); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if c.Audience == "" {
		return errors.New("host: an OpenID provider needs an audience: the identifier tokens for this service carry in aud (--oidc-audience)")
	}
	if c.PrincipalClaim == "" {
		c.PrincipalClaim = "sub"
	}
	if c.AdminRole == "" {
		c.AdminRole = DefaultOIDCAdminRole
	}
	switch {
	case c.TenantClaim != "" && c.Tenant != "":
		return errors.New("host: give a tenant claim (--oidc-tenant-claim) or a fixed tenant (--oidc-tenant), not both")
	case c.TenantClaim == "" && c.Tenant == "":
		return errors.New("host: name the claim that holds each caller's tenant (--oidc-tenant-claim), or the one tenant every caller is in (--oidc-tenant)")
	case c.Tenant != "":
		if err := checkName("tenant", c.Tenant); err != nil {
			return err
		}
	}
	for _, n := range []string{c.TenantClaim, c.PrincipalClaim, c.RolesClaim, c.AdminRole} {
		if len(n) > 256 || strings.ContainsFunc(n, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return errors.New("host: a claim or role name must be at most 256 printable characters")
		}
	}
	if len(c.Scopes) == 0 {
		c.Scopes = []string{"openid"}
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultOIDCLeeway
	}
	if c.KeysMaxAge == 0 {
		c.KeysMaxAge = DefaultOIDCKeysMaxAge
	}
	if c.RefreshFloor == 0 {
		c.RefreshFloor = DefaultOIDCRefreshFloor
	}
	if c.Leeway < 0 || c.RefreshFloor < 0 || c.KeysMaxAge <= c.RefreshFloor {
		return errors.New("host: the OIDC leeway and refresh floor must not be negative, and keys must live longer than the refresh floor")
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: defaultOIDCTimeout}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// checkProviderURL accepts an absolute https URL, or http on a loopback
// address (a provider on this machine, as in a test).
func checkProviderURL(what, s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("%s must be an absolute https:// URL", what)
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Errorf("%s must be https:// (plain http is allowed only on a loopback address)", what)
	}
	return nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Authenticate verifies the request's bearer JWT. A bearer token that is
// not a JWT at all is ErrBadCredentials without a code: it may be meant
// for another link of a [Chain] (a tokens file's).
func (o *OIDC) Authenticate(r *http.Request) (Caller, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return Caller{}, err
	}
	if strings.Count(tok, ".") != 2 {
		return Caller{}, ErrBadCredentials
	}
	jws, err := jose.ParseSignedCompact(tok, oidcAlgorithms)
	if err != nil || len(jws.Signatures) != 1 {
		return Caller{}, refuse(CodeInvalidToken, "host: the bearer token is not a JWT signed with an algorithm this host accepts ("+oidcAlgorithmNames+")")
	}
	payload, err := o.keys.verify(r.Context(), jws)
	var down *providerDown
	switch {
	case errors.As(err, &down):
		return Caller{}, ErrIdentityUnavailable // the key set logged why
	case errors.Is(err, errUnknownKey):
		return Caller{}, refuse(CodeUnknownKey, "host: the token is signed with a key the provider does not publish; sign in again to get a token from "+o.cfg.Issuer)
	case err != nil:
		return Caller{}, refuse(CodeInvalidToken, "host: the token's signature does not verify; sign in again")
	}
	return o.caller(payload)
}

// caller judges a verified payload's registered claims, then reads the
// caller from the configured ones.
func (o *OIDC) caller(payload []byte) (Caller, error) {
	var std jwt.Claims
	var all map[string]any
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if json.Unmarshal(payload, &std) != nil || d.Decode(&all) != nil {
		return Caller{}, refuse(CodeInvalidToken, "host: the token's claims are not a JSON object with the registered claims in their standard types")
	}
	if std.Expiry == nil {
		return Caller{}, refuse(CodeClaimMissing, "host: the token has no exp claim; this host accepts only tokens that expire")
	}
	err := std.ValidateWithLeeway(jwt.Expected{Issuer: o.cfg.Issuer, AnyAudience: jwt.Audience{o.cfg.Audience}, Time: o.cfg.Now()}, o.cfg.Leeway)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Caller{}, refuse(CodeWrongIssuer, "host: the token was issued by another issuer; this host accepts tokens from "+o.cfg.Issuer)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Caller{}, refuse(CodeWrongAudience, fmt.Sprintf("host: the token is meant for another service; this host accepts tokens whose aud holds %q", o.cfg.Audience))
	case errors.Is(err, jwt.ErrExpired):
		return Caller{}, refuse(CodeTokenExpired, "host: the token has expired; sign in again")
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return Caller{}, refuse(CodeInvalidToken, "host: the token is not valid yet; check that this host's clock and the provider's agree")
	case err != nil:
		return Caller{}, refuse(CodeInvalidToken, "host: the token's claims do not hold")
	}
	var who Caller
	if who.Principal, err = o.name(all, o.cfg.PrincipalClaim, "principal"); err != nil {
		return Caller{}, err
	}
	who.Tenant = o.cfg.Tenant
	if o.cfg.TenantClaim != "" {
		if who.Tenant, err = o.name(all, o.cfg.TenantClaim, "tenant"); err != nil {
			return Caller{}, err
		}
	}
	if o.cfg.RolesClaim != "" && slices.Contains(claimStrings(claim(all, o.cfg.RolesClaim)), o.cfg.AdminRole) {
		who.Role = RoleAdmin
	}
	return who, nil
}

// name reads a tenant or principal from a claim, checked as the tokens
// file checks them. The refusal names the claim, never its value.
func (o *OIDC) name(all map[string]any, claimName, what string) (string, error) {
	v, ok := claim(all, claimName)
	if !ok {
		return "", refuse(CodeClaimMissing, fmt.Sprintf("host: the token has no %q claim, which this host reads the %s from; have the provider add it, or configure another claim", claimName, what))
	}
	s, isString := v.(string)
	if !isString || checkName(what, s) != nil {
		return "", refuse(CodeClaimInvalid, fmt.Sprintf("host: the token's %q claim is not a usable %s (a string of 1 to 128 printable characters without spaces)", claimName, what))
	}
	return s, nil
}

// claim looks a claim up by its name, or, when the token holds no claim
// of that name and the name has dots, by the path the dots spell.
func claim(all map[string]any, name string) (any, bool) {
	if v, ok := all[name]; ok {
		return v, true
	}
	var cur any = all
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// claimStrings reads a claim that is a string or a list of strings.
func claimStrings(v any, ok bool) []string {
	if !ok {
		return nil
	}
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func refuse(code Code, msg string) error { return &CredentialError{Code: code, Message: msg} }

// signIn is what the console needs to sign people in at the provider:
// nil when no ClientID is configured.
func (o *OIDC) signIn() *oidcSignIn {
	if o.cfg.ClientID == "" {
		return nil
	}
	return &oidcSignIn{Issuer: o.cfg.Issuer, ClientID: o.cfg.ClientID, Audience: o.cfg.Audience, Scopes: o.cfg.Scopes,
		AuthorizationEndpoint: o.authURL, TokenEndpoint: o.tokenURL}
}

// signInOf finds the console's sign-in in an authenticator: that of the
// first OIDC link with a ClientID.
func signInOf(a Authenticator) *oidcSignIn {
	switch a := a.(type) {
	case *OIDC:
		return a.signIn()
	case Chain:
		for _, l := range a {
			if s := signInOf(l); s != nil {
				return s
			}
		}
	}
	return nil
}

// oidcSignIn is the console's sign-in configuration (GET /console/sign-in.json).
type oidcSignIn struct {
	Issuer                string   `json:"issuer"`
	ClientID              string   `json:"clientId"`
	Audience              string   `json:"audience"`
	Scopes                []string `json:"scopes"`
	AuthorizationEndpoint string   `json:"authorizationEndpoint"`
	TokenEndpoint         string   `json:"tokenEndpoint"`
}

var _ Authenticator = (*OIDC)(nil)
