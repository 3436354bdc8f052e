package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// Bounds of a person's credentials.
const (
	// MaxCredentialBytes bounds one credential's secret.
	MaxCredentialBytes = 16 << 10
	// MaxCredentialsPerPrincipal bounds the credentials one person keeps.
	MaxCredentialsPerPrincipal = 64
	// maxCredentialName bounds a credential's name.
	maxCredentialName = 64
)

// CredentialStore keeps people's credentials, sealed: it never sees a
// secret in clear. Like Store, every call takes the owner, so one person
// never reaches another's. host/sqlstore's Store is one.
type CredentialStore interface {
	// PutCredential stores c for owner, replacing one of the same name
	// (its CreatedAt kept); created reports that none was there.
	PutCredential(ctx context.Context, owner tool.Identity, c SealedCredential) (created bool, err error)
	// GetCredential returns owner's credential name, or ErrNoCredential.
	GetCredential(ctx context.Context, owner tool.Identity, name string) (SealedCredential, error)
	// ListCredentials returns owner's credentials by name, without their
	// sealed bytes.
	ListCredentials(ctx context.Context, owner tool.Identity) ([]SealedCredential, error)
	// DeleteCredential removes owner's credential name, or answers
	// ErrNoCredential.
	DeleteCredential(ctx context.Context, owner tool.Identity, name string) error
}

// ErrNoCredential: the person keeps no credential of that name.
var ErrNoCredential = errors.New("host: no credential of that name is stored for you")

// SealedCredential is a credential as the store keeps it: Sealed is the
// nonce and the AES-GCM ciphertext of the secret under the key KeyID,
// bound to its owner and name.
type SealedCredential struct {
	Name      string
	KeyID     string
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// AgentCredential names a credential the agent of every conversation
// gets, and the variable it gets it as: the provider's session
// configuration carries {"credentials": {Var: secret}} (provider/acp
// reads it; Config.Credentials there says which authentication method
// it feeds).
type AgentCredential struct {
	Name string // the person's credential (PUT /v1/credentials/{name})
	Var  string // the variable the agent sees it as
}

// CheckAgentCredentials refuses a list of agent credentials with an
// unusable name or variable, or a variable given twice.
func CheckAgentCredentials(list []AgentCredential) error {
	vars := map[string]bool{}
	for _, c := range list {
		if !ValidCredentialName(c.Name) {
			return fmt.Errorf("host: the agent credential %q is not a credential name: use 1 to %d lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", c.Name, maxCredentialName)
		}
		if !validVarName(c.Var) {
			return fmt.Errorf("host: the variable %q of the agent credential %s is not an environment variable name (letters, digits and '_', not starting with a digit)", c.Var, c.Name)
		}
		if vars[c.Var] {
			return fmt.Errorf("host: the variable %s is given two credentials; give each variable one", c.Var)
		}
		vars[c.Var] = true
	}
	return nil
}

// ValidCredentialName accepts 1 to 64 lower-case letters, digits, '.',
// '_' or '-', starting with a letter or digit.
func ValidCredentialName(name string) bool {
	if name == "" || len(name) > maxCredentialName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func validVarName(name string) bool {
	if name == "" || len(name) > 256 || name == "HOME" || name == "PATH" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Event types of people's credentials: the name, never the secret.
const (
	TypeCredentialStored  event.Type = "agentry.host.credential_stored"
	TypeCredentialDeleted event.Type = "agentry.host.credential_deleted"
)

// CredentialEvent is the payload of credential_stored and
// credential_deleted.
type CredentialEvent struct {
	Name    string `json:"name"`
	Created bool   `json:"created,omitempty"`
}

func init() {
	event.Register(TypeCredentialStored, func() any { return new(CredentialEvent) })
	event.Register(TypeCredentialDeleted, func() any { return new(CredentialEvent) })
}

// credentials is the host's side of people's credentials: the store and
// the keys. Which ones an agent needs is each agent's (hostedAgent.creds).
type credentials struct {
	store CredentialStore
	keys  *Keyring
	mu    sync.Mutex // a count and a put happen together
}

// newCredentials checks the credential options.
func newCredentials(opt Options) (*credentials, error) {
	switch {
	case opt.Credentials == nil && opt.CredentialKeys == nil && len(opt.AgentCredentials) == 0:
		return nil, nil
	case opt.Credentials == nil:
		return nil, errors.New("host: Options.CredentialKeys or AgentCredentials is set without Options.Credentials; pass the store that keeps them (host/sqlstore's Store)")
	case opt.CredentialKeys == nil:
		return nil, errors.New("host: Options.Credentials is set without Options.CredentialKeys; credentials are never kept in clear: pass a Keyring (ParseKeyring)")
	}
	return &credentials{store: opt.Credentials, keys: opt.CredentialKeys}, nil
}

func noCredentials() *apiError {
	return newError(http.StatusNotImplemented, CodeCredentialsUnavailable,
		"host: this host keeps no credentials; its operator serves with --credentials-key-file to keep them")
}

// credentialName reads the {name} of a credentials path.
func credentialName(r *http.Request) (string, *apiError) {
	name := r.PathValue("name")
	if !ValidCredentialName(name) {
		return "", fieldError(CodeInvalidField, "name", fmt.Sprintf("host: a credential name is 1 to %d lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", maxCredentialName))
	}
	return name, nil
}

// credentialView is a credential as the API lists it: never its secret.
type credentialView struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func viewOfCredential(c SealedCredential) credentialView {
	return credentialView{Name: c.Name, CreatedAt: c.CreatedAt.UTC(), UpdatedAt: c.UpdatedAt.UTC()}
}

// decodeCredential reads the body of PUT /v1/credentials/{name}:
// {"value": "..."}, 1 to MaxCredentialBytes of UTF-8 with no NUL (it
// becomes an environment variable).
func decodeCredential(body []byte) (string, error) {
	var raw struct {
		Value *string `json:"value"`
	}
	if err := decodeStrict(body, &raw); err != nil {
		return "", err
	}
	switch v := raw.Value; {
	case v == nil:
		return "", fieldError(CodeMissingField, "value", `host: send the secret as {"value": "..."}`)
	case *v == "" || len(*v) > MaxCredentialBytes:
		return "", fieldError(CodeInvalidField, "value", fmt.Sprintf("host: a credential is 1 to %d bytes", MaxCredentialBytes))
	case !utf8.ValidString(*v) || strings.IndexByte(*v, 0) >= 0:
		return "", fieldError(CodeInvalidField, "value", "host: a credential is UTF-8 text with no NUL byte (it reaches the agent as an environment variable)")
	}
	return *raw.Value, nil
}

func (h *Host) handlePutCredential(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	cr := h.creds
	if cr == nil {
		writeError(w, noCredentials())
		return
	}
	name, ae := credentialName(r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	body, ae := h.readBody(w, r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	secret, err := decodeCredential(body)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	cr.mu.Lock()
	defer cr.mu.Unlock()
	have, err := cr.store.ListCredentials(ctx, o)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	exists := slices.ContainsFunc(have, func(c SealedCredential) bool { return c.Name == name })
	if !exists && len(have) >= MaxCredentialsPerPrincipal {
		writeError(w, newError(http.StatusConflict, CodeTooManyCredentials,
			fmt.Sprintf("host: you keep %d credentials, the most allowed; delete one (DELETE /v1/credentials/{name}) first", len(have))))
		return
	}
	now := h.now().UTC()
	keyID, sealed := cr.keys.seal(ownerKey{o.Tenant, o.Principal}, name, []byte(secret))
	c := SealedCredential{Name: name, KeyID: keyID, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	created, err := cr.store.PutCredential(ctx, o, c)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	h.emit(TypeCredentialStored, &CredentialEvent{Name: name, Created: created}, "", o)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	} else if st, err := cr.store.GetCredential(ctx, o, name); err == nil {
		c.CreatedAt = st.CreatedAt
	}
	writeJSON(w, status, viewOfCredential(c))
}

func (h *Host) handleListCredentials(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	cr := h.creds
	if cr == nil {
		writeError(w, noCredentials())
		return
	}
	list, err := cr.store.ListCredentials(r.Context(), o)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	views := make([]credentialView, len(list))
	for i, c := range list {
		views[i] = viewOfCredential(c)
	}
	needs := []string{}
	for _, ag := range h.agents {
		for _, a := range ag.creds {
			if !slices.Contains(needs, a.Name) {
				needs = append(needs, a.Name)
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"credentials": views, "agentNeeds": needs})
}

func (h *Host) handleDeleteCredential(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	cr := h.creds
	if cr == nil {
		writeError(w, noCredentials())
		return
	}
	name, ae := credentialName(r)
	if ae != nil {
		writeError(w, ae)
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	switch err := cr.store.DeleteCredential(ctx, o, name); {
	case errors.Is(err, ErrNoCredential):
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "host: you keep no credential of that name; list yours with GET /v1/credentials"))
		return
	case err != nil:
		writeError(w, h.storeError(err))
		return
	}
	h.emit(TypeCredentialDeleted, &CredentialEvent{Name: name}, "", o)
	w.WriteHeader(http.StatusNoContent)
}

// missingCredentials refuses to open a conversation whose agent needs a
// credential the person has not stored, naming each one missing.
func (h *Host) missingCredentials(ctx context.Context, ag *hostedAgent, o tool.Identity) *apiError {
	cr := h.creds
	if cr == nil || len(ag.creds) == 0 {
		return nil
	}
	have, err := cr.store.ListCredentials(ctx, o)
	if err != nil {
		return h.storeError(err)
	}
	var missing []string
	for _, a := range ag.creds {
		if !slices.ContainsFunc(have, func(c SealedCredential) bool { return c.Name == a.Name }) {
			missing = append(missing, a.Name)
		}
	}
	return credentialMissing(missing)
}

func credentialMissing(missing []string) *apiError {
	if len(missing) == 0 {
		return nil
	}
	e := newError(http.StatusPreconditionFailed, CodeCredentialMissing,
		fmt.Sprintf("host: this host's agent needs your credential %s; store it first (PUT /v1/credentials/%s with {\"value\": \"...\"})",
			strings.Join(missing, ", "), missing[0]))
	e.Missing = missing
	return e
}

// withCredentials adds the person's credentials the agent needs to a
// session configuration, as {"credentials": {VAR: secret}}. A credential
// sealed under an older key is sealed again under the current one.
func (h *Host) withCredentials(ctx context.Context, ag *hostedAgent, o tool.Identity, cfg json.RawMessage) (json.RawMessage, *apiError) {
	cr := h.creds
	if cr == nil || len(ag.creds) == 0 {
		return cfg, nil
	}
	fields := map[string]json.RawMessage{}
	if len(cfg) > 0 {
		if err := json.Unmarshal(cfg, &fields); err != nil || fields == nil {
			h.log.Error("host: the session configuration is not a JSON object; credentials cannot be added to it")
			return nil, newError(http.StatusInternalServerError, CodeInternal, "host: the session's configuration could not be prepared")
		}
	}
	env := map[string]string{}
	var missing []string
	for _, a := range ag.creds {
		secret, err := h.openCredential(ctx, o, a.Name)
		switch {
		case errors.Is(err, ErrNoCredential):
			missing = append(missing, a.Name)
			continue
		case errors.Is(err, errUnknownCredKey), errors.Is(err, errBadSeal):
			h.log.Warn("host: a stored credential does not open", "credential", a.Name, "err", err)
			e := newError(http.StatusPreconditionFailed, CodeCredentialUnreadable, fmt.Sprintf("host: your credential %s cannot be opened: %v", a.Name, err))
			e.Missing = []string{a.Name}
			return nil, e
		case err != nil:
			return nil, h.storeError(err)
		}
		env[a.Var] = secret
	}
	if ae := credentialMissing(missing); ae != nil {
		return nil, ae
	}
	b, _ := json.Marshal(env)
	fields["credentials"] = b
	out, _ := json.Marshal(fields)
	return out, nil
}

// openCredential reads and opens one of the person's credentials, sealing
// it again under the current key when an older one sealed it.
func (h *Host) openCredential(ctx context.Context, o tool.Identity, name string) (string, error) {
	cr := h.creds
	c, err := cr.store.GetCredential(ctx, o, name)
	if err != nil {
		return "", err
	}
	owner := ownerKey{o.Tenant, o.Principal}
	secret, err := cr.keys.open(owner, name, c.KeyID, c.Sealed)
	if err != nil {
		return "", err
	}
	if c.KeyID != cr.keys.Current() {
		c.KeyID, c.Sealed = cr.keys.seal(owner, name, secret)
		c.UpdatedAt = h.now().UTC()
		if _, err := cr.store.PutCredential(ctx, o, c); err != nil {
			// The secret opened: the turn goes on; the next opening tries
			// the rotation again.
			h.log.Warn("host: sealing a credential again under the current key", "credential", name, "err", err)
		}
	}
	return string(secret), nil
}
