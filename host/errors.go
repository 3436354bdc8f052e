package host

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Code is a stable error code of the HTTP API: clients match on it, never
// on the message.
type Code string

// The API's error codes, each with the status it is sent with.
const (
	CodeUnauthenticated      Code = "unauthenticated"        // 401: no credentials
	CodeInvalidToken         Code = "invalid_token"          // 401: credentials refused (unknown, malformed, or a signature that does not verify)
	CodeTokenExpired         Code = "token_expired"          // 401: a JWT past its expiry (or before its not-before), or a tokens-file token past its expires=
	CodeWrongAudience        Code = "wrong_audience"         // 401: a JWT meant for another service
	CodeWrongIssuer          Code = "wrong_issuer"           // 401: a JWT from another issuer
	CodeUnknownKey           Code = "unknown_key"            // 401: a JWT signed with a key the issuer does not publish
	CodeClaimMissing         Code = "claim_missing"          // 401: a JWT without a claim the host reads identity from (or without exp)
	CodeClaimInvalid         Code = "claim_invalid"          // 401: a JWT whose tenant or principal claim is not a usable name
	CodeIdentityUnavailable  Code = "identity_unavailable"   // 503: the identity provider cannot be reached; the credentials were not judged
	CodeForbidden            Code = "forbidden"              // 403: an admin-only path asked by a person of the same tenant
	CodeNotFound             Code = "not_found"              // 404: no such session for this caller, or no such path
	CodeMethodNotAllowed     Code = "method_not_allowed"     // 405
	CodeUnsupportedMedia     Code = "unsupported_media_type" // 415: a body that is not application/json
	CodeBodyTooLarge         Code = "body_too_large"         // 413
	CodeInvalidJSON          Code = "invalid_json"           // 400: not JSON, or a field of the wrong type
	CodeMissingField         Code = "missing_field"          // 400
	CodeInvalidField         Code = "invalid_field"          // 400
	CodeUnknownField         Code = "unknown_field"          // 400
	CodeSessionBusy          Code = "session_busy"           // 409: a turn is running on this session
	CodeAwaitingDecision     Code = "awaiting_decision"      // 409: the session waits for a decision, not a message
	CodeNoPendingQuestion    Code = "no_pending_question"    // 409: a decision for a session that asks nothing
	CodeSessionClosed        Code = "session_closed"         // 409
	CodeConflict             Code = "conflict"               // 409: changed elsewhere since read
	CodeProviderMismatch     Code = "provider_mismatch"      // 409: the session is held by another provider
	CodeNoPendingInteraction Code = "no_pending_interaction" // 409: an answer for an interaction nobody asked
	CodeNoTurn               Code = "no_turn"                // 409: a cancel while no turn runs or waits
	CodeTurnCancelled        Code = "turn_cancelled"         // 409: the turn was cancelled before it answered
	CodeTooManyTurns         Code = "too_many_turns"         // 429
	CodeTooManySessions      Code = "too_many_sessions"      // 429
	CodeTooManyRequests      Code = "too_many_requests"      // 429: the caller has as many requests in flight as allowed
	CodeRateLimited          Code = "rate_limited"           // 429: the caller opened conversations faster than allowed (Retry-After: until the next may open)
	CodeBodyTooSlow          Code = "body_too_slow"          // 408: the request body arrived slower than the host's floor, and was cut
	CodeTooManyStreams       Code = "too_many_streams"       // 429: the caller has as many event streams (GET /v1/events) open as allowed
	CodeCapacity             Code = "capacity"               // 429: every live tool session is busy
	CodeBudgetExhausted      Code = "budget_exhausted"       // 429: a budget's cap for the UTC period (Retry-After: its end) or the principal's turn rate (Retry-After: a turn leaves the window) is used up
	CodeTurnFailed           Code = "turn_failed"            // 500: the turn ran and failed
	CodeTurnCut              Code = "turn_cut"               // 503: the shutdown drain bound cut the turn
	CodeTurnTimedOut         Code = "turn_timed_out"         // 504: the turn ran past the turn timeout
	CodeShuttingDown         Code = "shutting_down"          // 503
	CodeStoreUnavailable     Code = "store_unavailable"      // 503
	CodeProviderUnavailable  Code = "provider_unavailable"   // 503: the provider would not open the session
	CodeInternal             Code = "internal"               // 500
	CodeReplicaUnavailable   Code = "replica_unavailable"    // 503: the replica holding the session cannot be reached (Retry-After: until its lease lapses)
	CodeSessionMoved         Code = "session_moved"          // 503: the session changed replicas while a forwarded request was on its way
	CodeTurnLost             Code = "turn_lost"              // 500: the turn was cut because its replica lost the session; it may have run in part (never resend it blindly)
	CodeUnknownAgent         Code = "unknown_agent"          // 400: POST /v1/sessions names an agent the host does not offer (the message lists those it does)
	CodeModelNotOffered      Code = "model_not_offered"      // 400: POST /v1/sessions names a model the agent does not offer (the message lists those it does)
)

// The workspace's error codes: an upload refused, and a provider whose
// sessions keep no files.
const (
	CodeWorkspaceUnsupported    Code = "workspace_unsupported"      // 501: the agent keeps no files the host can reach
	CodeWorkspaceUnsafePath     Code = "workspace_unsafe_path"      // 400: an absolute name, "..", or not a local name
	CodeWorkspaceLinkOutside    Code = "workspace_link_outside"     // 400: a symlink or hard link leaving the workspace
	CodeWorkspaceSpecialFile    Code = "workspace_special_file"     // 400: a device node, FIFO or socket
	CodeWorkspaceTooLarge       Code = "workspace_too_large"        // 413: past the byte bound
	CodeWorkspaceTooManyEntries Code = "workspace_too_many_entries" // 413: past the entry bound
	CodeWorkspaceInvalidArchive Code = "workspace_invalid_archive"  // 400: not a tar (or gzip of one), or cut short
	CodeWorkspaceConflict       Code = "workspace_conflict"         // 409: an entry collides with what the workspace holds
)

// The credentials' error codes.
const (
	CodeCredentialsUnavailable Code = "credentials_unavailable" // 501: the host keeps no credentials (no key)
	CodeCredentialMissing      Code = "credential_missing"      // 412: the agent needs a credential the person has not stored
	CodeCredentialUnreadable   Code = "credential_unreadable"   // 412: a stored credential does not open with the host's keys
	CodeTooManyCredentials     Code = "too_many_credentials"    // 409: the person keeps as many credentials as allowed
)

// The clone's error codes (POST /v1/sessions {"clone"}).
const (
	CodeCloneUnsupported Code = "clone_unsupported" // 501: the host clones nothing (no --clone-allow)
	CodeCloneRefused     Code = "clone_refused"     // 400: a URL the host will not clone (its host not allowed, not https/http, a user in it)
	CodeCloneFailed      Code = "clone_failed"      // 422: git could not clone it
)

// The standing rules' error codes (rules.go).
const (
	CodeRuleNotFound Code = "rule_not_found" // 404: no such rule for this caller
	CodeTooManyRules Code = "too_many_rules" // 409: the caller has as many rules as allowed
)

// apiError is an error response: {"error": {"code", "message", "field"}}.
type apiError struct {
	status  int
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Missing names what the request needs and the caller has not given
	// (credential_missing: the credentials to store).
	Missing    []string `json:"missing,omitempty"`
	retryAfter int      // seconds; 0 for none
}

func (e *apiError) Error() string { return string(e.Code) + ": " + e.Message }

func newError(status int, code Code, msg string) *apiError {
	return &apiError{status: status, Code: code, Message: msg}
}

func fieldError(code Code, field, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, Code: code, Message: msg, Field: field}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"host: the response could not be encoded"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, struct {
		Error *apiError `json:"error"`
	}{e})
}
