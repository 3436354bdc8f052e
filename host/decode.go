package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// TurnRequest is the body of POST /v1/sessions/{id}/turns.
type TurnRequest struct {
	Message string `json:"message"`
}

// DecisionRequest is the body of POST /v1/sessions/{id}/decision.
type DecisionRequest struct {
	Approve bool   `json:"approve"`
	Note    string `json:"note,omitempty"`
	// Interaction, when set, answers the session interaction with this id
	// instead of a paused turn: Answer is the person's answer, and
	// "approve": false declines it ("approve" may then be left out and
	// reads as true).
	Interaction string `json:"interaction,omitempty"`
	Answer      string `json:"answer,omitempty"`
	// Rule, with "approve": true, makes a standing approval of what the
	// pending request is about (see [Rule]).
	Rule *RuleRequest `json:"rule,omitempty"`
}

// DecodeTurn decodes and checks a turn request: a JSON object with a
// non-empty string "message" and nothing else.
func DecodeTurn(body []byte) (TurnRequest, error) {
	var raw struct {
		Message *string `json:"message"`
	}
	if err := decodeStrict(body, &raw); err != nil {
		return TurnRequest{}, err
	}
	switch {
	case raw.Message == nil:
		return TurnRequest{}, fieldError(CodeMissingField, "message", `host: the body needs "message": what the person says`)
	case strings.TrimSpace(*raw.Message) == "":
		return TurnRequest{}, fieldError(CodeInvalidField, "message", `host: "message" is empty; send what the person says`)
	}
	return TurnRequest{Message: *raw.Message}, nil
}

// DecodeDecision decodes and checks a decision: {"approve": bool} with an
// optional string "note".
func DecodeDecision(body []byte) (DecisionRequest, error) {
	var raw struct {
		Approve     *bool           `json:"approve"`
		Note        *string         `json:"note"`
		Interaction *string         `json:"interaction"`
		Answer      *string         `json:"answer"`
		Rule        json.RawMessage `json:"rule"`
	}
	if err := decodeStrict(body, &raw); err != nil {
		return DecisionRequest{}, err
	}
	if raw.Interaction != nil {
		d := DecisionRequest{Interaction: *raw.Interaction, Approve: raw.Approve == nil || *raw.Approve}
		switch {
		case d.Interaction == "":
			return DecisionRequest{}, fieldError(CodeInvalidField, "interaction", `host: "interaction" is empty; send the id the session shows`)
		case raw.Note != nil:
			return DecisionRequest{}, fieldError(CodeUnknownField, "note", `host: an interaction's answer goes in "answer", not "note"`)
		case raw.Rule != nil:
			return DecisionRequest{}, fieldError(CodeUnknownField, "rule", `host: a rule goes with the approval of a paused turn, not with an interaction's answer`)
		}
		if raw.Answer != nil {
			d.Answer = *raw.Answer
		}
		if d.Approve && d.Answer == "" {
			return DecisionRequest{}, fieldError(CodeMissingField, "answer", `host: answering an interaction needs "answer" (or "approve": false to decline)`)
		}
		return d, nil
	}
	if raw.Answer != nil {
		return DecisionRequest{}, fieldError(CodeUnknownField, "answer", `host: "answer" goes with "interaction"; a paused turn takes "approve" and "note"`)
	}
	if raw.Approve == nil {
		return DecisionRequest{}, fieldError(CodeMissingField, "approve", `host: the body needs "approve": true or false`)
	}
	d := DecisionRequest{Approve: *raw.Approve}
	if raw.Note != nil {
		d.Note = *raw.Note
	}
	if raw.Rule != nil {
		if !d.Approve {
			return DecisionRequest{}, fieldError(CodeInvalidField, "rule", `host: a rule is a standing approval; it goes with "approve": true`)
		}
		var rr RuleRequest
		if err := decodeStrict(raw.Rule, &rr); err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				ae.Field = "rule" + dotted(ae.Field)
				ae.Message = strings.Replace(ae.Message, "the body", `"rule"`, 1)
			}
			return DecisionRequest{}, err
		}
		if rr.Scope == "" {
			return DecisionRequest{}, fieldError(CodeMissingField, "rule.scope", `host: a rule needs "scope": "conversation" or "everywhere"`)
		}
		d.Rule = &rr
	}
	return d, nil
}

// CreateRequest is the body of POST /v1/sessions: the agent to talk to
// (empty: the host's default) and the model among the agent's (empty:
// the agent's default).
type CreateRequest struct {
	Agent string `json:"agent,omitempty"`
	Model string `json:"model,omitempty"`
	// Clone, when set, is a git repository cloned into the new
	// conversation's workspace before it opens.
	Clone *CloneSpec `json:"clone,omitempty"`
}

// DecodeCreate decodes and checks the body of POST /v1/sessions: empty,
// or a JSON object with at most "agent" and "model", each a name (an
// agent's 1 to 64 characters, a model's 1 to 256, no control
// characters), and "clone" ({"url", "ref", "credential"}, see
// CloneSpec). Whether the host offers them is the host's to say.
func DecodeCreate(body []byte) (CreateRequest, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return CreateRequest{}, nil
	}
	var raw struct {
		Agent *string    `json:"agent"`
		Model *string    `json:"model"`
		Clone *CloneSpec `json:"clone"`
	}
	if err := decodeStrict(body, &raw); err != nil {
		return CreateRequest{}, err
	}
	var c CreateRequest
	if raw.Agent != nil {
		if CheckAgentName(*raw.Agent) != nil {
			return CreateRequest{}, fieldError(CodeInvalidField, "agent", `host: "agent" is not an agent's name (1 to 64 of a-z, 0-9, '-' and '_'); GET /v1/agents lists them`)
		}
		c.Agent = *raw.Agent
	}
	if raw.Model != nil {
		if checkModelName(*raw.Model) != nil {
			return CreateRequest{}, fieldError(CodeInvalidField, "model", `host: "model" is not a model's name (1 to 256 printable characters); GET /v1/agents lists each agent's`)
		}
		c.Model = *raw.Model
	}
	if raw.Clone != nil {
		if err := checkClone(raw.Clone); err != nil {
			return CreateRequest{}, err
		}
		c.Clone = raw.Clone
	}
	return c, nil
}

// decodeStrict decodes one JSON object into v, refusing unknown fields and
// trailing data, and names the field at fault.
func decodeStrict(body []byte, v any) error {
	if !utf8.Valid(body) {
		return fieldError(CodeInvalidJSON, "", "host: the body is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return fieldError(CodeInvalidJSON, "", "host: the body is empty; send a JSON object")
	}
	if trimmed[0] != '{' {
		return fieldError(CodeInvalidJSON, "", "host: the body must be a JSON object")
	}
	if err := checkKeys(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fieldError(CodeInvalidJSON, "", "host: the body has data after its JSON object; send one object")
	}
	return nil
}

// checkKeys refuses what encoding/json lets through in a body's object: a
// key given twice (it would keep the last, silently) and a key that
// matches a field only when case is ignored ("Message" for "message").
// Malformed JSON is left to the decoder, which says where.
func checkKeys(body []byte, v any) error {
	names := fieldNames(reflect.TypeOf(v))
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		key, ok := t.(string)
		if !ok {
			return nil
		}
		if seen[key] {
			return fieldError(CodeInvalidJSON, key, fmt.Sprintf("host: field %q is given twice; send it once", key))
		}
		seen[key] = true
		if !names[key] {
			for n := range names {
				if strings.EqualFold(n, key) {
					return fieldError(CodeUnknownField, key, fmt.Sprintf("host: unknown field %q; field names are case-sensitive (did you mean %q?)", key, n))
				}
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// fieldNames lists the JSON names of a struct's fields (t may point to
// it).
func fieldNames(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fieldError(CodeInvalidJSON, "", fmt.Sprintf("host: the body is not valid JSON (at byte %d)", syn.Offset))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return fieldError(CodeInvalidJSON, "", "host: the body must be a JSON object")
		}
		return fieldError(CodeInvalidJSON, field, fmt.Sprintf("host: field %q must be a %s, not a JSON %s", field, kindName(typ.Type.String()), typ.Value))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fieldError(CodeInvalidJSON, "", "host: the body ends before its JSON object does")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return fieldError(CodeUnknownField, name, fmt.Sprintf("host: unknown field %q; remove it (check its spelling)", name))
	}
	return fieldError(CodeInvalidJSON, "", "host: the body is not valid JSON")
}

func kindName(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "string":
		return "string"
	case "bool":
		return "boolean (true or false)"
	}
	return goType
}

func dotted(field string) string {
	if field == "" {
		return ""
	}
	return "." + field
}
