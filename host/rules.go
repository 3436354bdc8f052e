package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Rule is a standing approval a person made while answering a check-in:
// the host answers yes, without asking, to every later approval request
// of the same person (tenant and principal) for the same tool whose
// arguments the rule's shape matches (see MatchAny, MatchExact,
// MatchCommand) — in one conversation, or (Conversation empty) in any of
// theirs. A rule never answers another person's request, an elicitation,
// or a request whose agent offers no one-time approval.
type Rule struct {
	ID    string        `json:"id"`
	Owner tool.Identity `json:"-"`
	Tool  string        `json:"tool"`
	// Conversation is the one conversation the rule holds in; empty: all
	// of the owner's.
	Conversation string `json:"sessionId,omitempty"`
	// Match is MatchAny, MatchExact (Args) or MatchCommand (Pattern).
	Match     string          `json:"match"`
	Args      json.RawMessage `json:"args,omitempty"`
	Pattern   string          `json:"pattern,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
}

// Rule scopes, as a decision names them.
const (
	ScopeConversation = "conversation"
	ScopeEverywhere   = "everywhere"
)

// RuleRequest is the "rule" of a decision: make a standing approval of
// what the pending request is about. Match defaults to MatchAny for a
// conversation's rule and MatchExact for one that holds everywhere.
type RuleRequest struct {
	Scope   string `json:"scope"`
	Match   string `json:"match,omitempty"`
	Pattern string `json:"pattern,omitempty"`
}

var (
	// ErrRuleNotFound: no such rule for this owner.
	ErrRuleNotFound = errors.New("host: no such rule")
	// ErrTooManyRules: the owner has as many rules as the host allows.
	ErrTooManyRules = errors.New("host: you have as many standing rules as the host allows; revoke one (DELETE /v1/rules/{id}) first")
	// ErrRuleExists: a rule with this id is stored.
	ErrRuleExists = errors.New("host: a rule with this id exists")
)

// TypeRuleApplied: a request a rule answered without asking the person.
const TypeRuleApplied event.Type = "agentry.host.rule_applied"

func init() {
	event.Register(TypeRuleApplied, func() any { return new(RuleAppliedEvent) })
}

// RuleAppliedEvent is the payload of rule_applied: which rule answered
// which request of which tool (never the arguments).
type RuleAppliedEvent struct {
	Rule      string `json:"rule"`
	Tool      string `json:"tool"`
	RequestID string `json:"requestId"`
}

// CheckRule reports what makes r unfit to store.
func CheckRule(r Rule) error {
	switch {
	case !validRuleID(r.ID):
		return errors.New("host: a rule's id is malformed")
	case r.Owner.Tenant == "" || r.Owner.Principal == "" || r.Owner.ConversationID != "":
		return errors.New("host: a rule belongs to a tenant and a principal")
	case r.Tool == "":
		return errors.New("host: a rule names its tool")
	}
	switch r.Match {
	case MatchAny:
		if r.Conversation == "" {
			return errors.New("host: a rule for any arguments holds in one conversation only")
		}
	case MatchExact:
		if c, ok := canonicalArgs(r.Args); !ok || string(c) != string(r.Args) {
			return errors.New("host: an exact rule keeps its arguments as canonical JSON")
		}
	case MatchCommand:
		if _, err := ParseCommandPattern(r.Pattern); err != nil {
			return err
		}
	default:
		return fmt.Errorf("host: unknown rule match %q", r.Match)
	}
	return nil
}

func newRuleID() string { return newID("rul_") }

func validRuleID(id string) bool { return validID(id, "rul_") }

// ruleFor makes the rule a decision asks for, from the request the
// conversation waits on: the person approves what they were shown, so a
// rule whose shape does not match that request is refused.
func ruleFor(owner tool.Identity, conv string, p *Pending, req RuleRequest, now time.Time) (Rule, *apiError) {
	bad := func(msg string) (Rule, *apiError) { return Rule{}, fieldError(CodeInvalidField, "rule", msg) }
	switch {
	case p.Kind != "" && p.Kind != string(provider.RequestApproval):
		return bad("host: a rule answers approvals; this question asks for input, so answer it without one")
	case p.Tool == "":
		return bad("host: this question names no tool, so no rule can be made of it; answer it without one")
	}
	r := Rule{ID: newRuleID(), Owner: tool.Identity{Tenant: owner.Tenant, Principal: owner.Principal}, Tool: p.Tool, Match: req.Match, CreatedAt: now}
	switch req.Scope {
	case ScopeConversation:
		r.Conversation = conv
		if r.Match == "" {
			r.Match = MatchAny
		}
	case ScopeEverywhere:
		if r.Match == "" {
			r.Match = MatchExact
		}
	default:
		return bad(fmt.Sprintf(`host: a rule's "scope" is %q or %q`, ScopeConversation, ScopeEverywhere))
	}
	switch r.Match {
	case MatchAny:
		if r.Conversation == "" {
			return bad(`host: a rule for any arguments holds in this conversation only ("scope": "conversation"); everywhere, use "match": "exact" or "command"`)
		}
	case MatchExact:
		c, ok := canonicalArgs(p.Args)
		if !ok {
			return bad("host: the agent did not say (or sent too much of) what this request is about, so no exact rule can be made of it; answer it without one")
		}
		r.Args = c
	case MatchCommand:
		pat, err := ParseCommandPattern(req.Pattern)
		if err != nil {
			return bad(err.Error())
		}
		words, ok := commandOf(p.Args)
		switch {
		case !ok:
			return bad(`host: this request is not a command of plain words (a "command" of letters, digits and ._/=:,@%+- only); make an exact rule instead`)
		case !matchCommand(pat, words):
			return bad("host: the pattern does not match the command this request is about; a rule starts with what you were asked")
		}
		r.Pattern = req.Pattern
	default:
		return bad(fmt.Sprintf(`host: a rule's "match" is %q, %q or %q`, MatchAny, MatchExact, MatchCommand))
	}
	if req.Pattern != "" && r.Match != MatchCommand {
		return bad(`host: "pattern" goes with "match": "command"`)
	}
	return r, nil
}

// makeRule stores the rule a decision asks for.
func (h *Host) makeRule(ctx context.Context, lc *liveConv, req RuleRequest) (*Rule, *apiError) {
	r, ae := ruleFor(lc.owner, lc.id, lc.conv.Pending, req, h.now().UTC())
	if ae != nil {
		return nil, ae
	}
	switch err := h.store.AddRule(ctx, r, h.opt.MaxRulesPerPrincipal); {
	case errors.Is(err, ErrTooManyRules):
		return nil, newError(http.StatusConflict, CodeTooManyRules, fmt.Sprintf("host: you have %d standing rules, the most allowed; revoke one (DELETE /v1/rules/{id}) first", h.opt.MaxRulesPerPrincipal))
	case err != nil:
		return nil, h.storeError(err)
	}
	return &r, nil
}

// maxAutoAnswers bounds the requests rules answer in one turn: past it,
// the person is asked.
const maxAutoAnswers = 64

// standing finds the owner's rule that answers req, records that it does
// (a turn-log entry naming it, then an event) and returns it; nil when
// the person must be asked. A rule is never applied when the store cannot
// say which rules stand or cannot record the answer.
func (h *Host) standing(ctx context.Context, lc *liveConv, t *turnRun) *Rule {
	req := t.request
	if req == nil || req.Kind != provider.RequestApproval || t.auto >= maxAutoAnswers {
		return nil
	}
	if req.Choices != nil && !slices.Contains(req.Choices, provider.ChoiceAllowOnce) {
		return nil // the agent would remember an "always"; the host's rule could not be revoked
	}
	rules, err := h.store.Rules(ctx, lc.owner)
	if err != nil {
		h.log.Warn("host: reading the standing rules failed; the person is asked", "session", lc.id, "err", err)
		return nil
	}
	for i := range rules {
		r := &rules[i]
		if !r.Matches(lc.id, req.Tool, req.Args) {
			continue
		}
		now := h.now().UTC()
		if err := h.store.AppendTurn(ctx, lc.owner, lc.id, Turn{RunID: t.runID, Kind: "rule", Outcome: TurnApproved, Rule: r.ID, Started: now, Ended: now}); err != nil {
			h.log.Warn("host: recording a rule's answer failed; the person is asked", "session", lc.id, "rule", r.ID, "err", err)
			return nil
		}
		h.bus.Export(event.Event{Type: TypeRuleApplied, Payload: &RuleAppliedEvent{Rule: r.ID, Tool: req.Tool, RequestID: req.ID},
			Meta: event.Meta{RunID: t.runID, SessionID: lc.id, Tenant: lc.owner.Tenant, Principal: lc.owner.Principal}})
		t.auto++
		return r
	}
	return nil
}

// handleRules lists the caller's standing rules, oldest first.
func (h *Host) handleRules(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	rules, err := h.store.Rules(r.Context(), o)
	if err != nil {
		writeError(w, h.storeError(err))
		return
	}
	out := make([]ruleView, 0, len(rules))
	for _, r := range rules {
		out = append(out, viewRule(r))
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": out})
}

// handleDeleteRule revokes one of the caller's rules: from then on the
// person is asked again. Another person's rule is not found.
func (h *Host) handleDeleteRule(w http.ResponseWriter, r *http.Request, o tool.Identity) {
	id := r.PathValue("id")
	err := ErrRuleNotFound
	if validRuleID(id) {
		ctx, cancel := storeCtx(r)
		defer cancel()
		err = h.store.DeleteRule(ctx, o, id)
	}
	switch {
	case errors.Is(err, ErrRuleNotFound):
		writeError(w, newError(http.StatusNotFound, CodeRuleNotFound, "host: no such rule; list yours with GET /v1/rules"))
	case err != nil:
		writeError(w, h.storeError(err))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// ruleView is a rule on the wire: the rule and its scope.
type ruleView struct {
	Rule
	Scope string `json:"scope"`
}

func viewRule(r Rule) ruleView {
	v := ruleView{Rule: r, Scope: ScopeEverywhere}
	if r.Conversation != "" {
		v.Scope = ScopeConversation
	}
	return v
}
