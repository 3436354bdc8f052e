package acp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/provider"
)

// An elicitation/create becomes one session interaction, a question:
//
//   - a form whose schema asks one string, or one choice among strings
//     (enum, or oneOf of consts), asks that field; the answer is accepted
//     as {"<field>": answer};
//   - a URL elicitation asks the person to open the URL; any answer
//     accepts, a decline declines;
//   - anything richer is declined, with the reason in an
//     agentry.acp.elicitation event.
//
// A declined question is declined; the person's context ending or the
// session closing cancels.

// elicitField is the one field a form asks.
type elicitField struct {
	name     string
	options  []string
	required bool
	note     string // the field's title and description, for the person
}

// stringKeys are the keywords a string field may carry and still be asked
// as a plain question.
var stringKeys = []string{"type", "title", "description", "default", "enum", "enumNames", "oneOf"}

// namedKeys are the keywords a refusal names; any other is not repeated
// (it is the agent's text).
var namedKeys = []string{"format", "pattern", "minLength", "maxLength", "minimum", "maximum", "items", "properties",
	"anyOf", "allOf", "const", "$ref", "uniqueItems", "minItems", "maxItems"}

// formField reads a form's schema; it fails, saying why, when the schema
// asks more than one string or a choice among strings.
func formField(s sdk.UnstableElicitationSchema) (elicitField, error) {
	if s.Type != "" && s.Type != sdk.UnstableElicitationSchemaTypeObject {
		return elicitField{}, errors.New("the schema is not an object")
	}
	if len(s.Properties) != 1 {
		return elicitField{}, fmt.Errorf("the form asks %d fields; only a form of one field can be asked as a question", len(s.Properties))
	}
	var f elicitField
	var raw any
	for name, v := range s.Properties {
		f.name, raw = name, v
	}
	if err := provider.CheckID(f.name); err != nil {
		return elicitField{}, fmt.Errorf("the field's name is unusable: %w", err)
	}
	prop, ok := raw.(map[string]any)
	if !ok {
		return elicitField{}, errors.New("the field's schema is not an object")
	}
	for k := range prop {
		if !slices.Contains(stringKeys, k) {
			if !slices.Contains(namedKeys, k) {
				k = "a keyword"
			}
			return elicitField{}, fmt.Errorf("the field's schema uses %s, which a question cannot honour", k)
		}
	}
	if t, _ := prop["type"].(string); t != "string" {
		return elicitField{}, errors.New("the field is not a string")
	}
	for _, r := range s.Required {
		f.required = f.required || r == f.name
	}
	switch {
	case prop["enum"] != nil && prop["oneOf"] != nil:
		return elicitField{}, errors.New("the field has both enum and oneOf")
	case prop["enum"] != nil:
		list, ok := prop["enum"].([]any)
		if !ok {
			return elicitField{}, errors.New("the field's enum is not a list")
		}
		for _, v := range list {
			s, ok := v.(string)
			if !ok {
				return elicitField{}, errors.New("the field's enum has a value that is not a string")
			}
			f.options = append(f.options, s)
		}
	case prop["oneOf"] != nil:
		list, ok := prop["oneOf"].([]any)
		if !ok {
			return elicitField{}, errors.New("the field's oneOf is not a list")
		}
		for _, v := range list {
			m, _ := v.(map[string]any)
			s, ok := m["const"].(string)
			if !ok {
				return elicitField{}, errors.New("the field's oneOf has an entry that is not a string const")
			}
			f.options = append(f.options, s)
		}
	}
	if prop["enum"] != nil || prop["oneOf"] != nil {
		if len(f.options) == 0 {
			return elicitField{}, errors.New("the field offers no choices")
		}
		if len(f.options) > provider.MaxInteractionOptions {
			return elicitField{}, fmt.Errorf("the field offers %d choices; a question offers at most %d", len(f.options), provider.MaxInteractionOptions)
		}
	}
	title, _ := prop["title"].(string)
	desc, _ := prop["description"].(string)
	switch {
	case title != "" && desc != "":
		f.note = title + ": " + desc
	case title != "":
		f.note = title
	default:
		f.note = desc
	}
	return f, nil
}

// urlMessage is what the person reads for a URL elicitation. Only http
// and https URLs are shown.
func urlMessage(u *sdk.UnstableCreateElicitationUrl) (string, error) {
	parsed, err := url.Parse(u.Url)
	if err != nil || (parsed.Scheme != "https" && parsed.Scheme != "http") || parsed.Host == "" {
		return "", errors.New("the URL is not an absolute http or https URL")
	}
	msg := u.Message
	if msg != "" {
		msg += "\n\n"
	}
	return msg + "Open " + parsed.String() + " and answer when done, or decline.", nil
}

var (
	elicitDecline = sdk.UnstableCreateElicitationResponse{Decline: &sdk.UnstableCreateElicitationDecline{Action: "decline"}}
	elicitCancel  = sdk.UnstableCreateElicitationResponse{Cancel: &sdk.UnstableCreateElicitationCancel{Action: "cancel"}}
)

// elicit answers one elicitation/create through the session's
// interactions.
func (s *session) elicit(ctx context.Context, p sdk.UnstableCreateElicitationRequest) sdk.UnstableCreateElicitationResponse {
	ev := &ElicitationEvent{}
	defer s.emit(TypeElicitation, ev)
	decline := func(reason string) sdk.UnstableCreateElicitationResponse {
		ev.Outcome, ev.Reason = "declined", reason
		return elicitDecline
	}
	var in provider.Interaction
	var field elicitField
	switch {
	case p.Form != nil:
		ev.Mode = "form"
		ev.Fields = len(p.Form.RequestedSchema.Properties)
		f, err := formField(p.Form.RequestedSchema)
		if err != nil {
			return decline(err.Error())
		}
		field = f
		msg := p.Form.Message
		if f.note != "" && f.note != msg {
			if msg != "" {
				msg += "\n\n"
			}
			msg += f.note
		}
		in = provider.Interaction{Kind: provider.InteractionQuestion, Message: msg, Options: f.options}
		ev.Options = len(f.options)
	case p.Url != nil:
		ev.Mode = "url"
		msg, err := urlMessage(p.Url)
		if err != nil {
			return decline(err.Error())
		}
		in = provider.Interaction{Kind: provider.InteractionQuestion, Message: msg}
	default:
		return decline("the elicitation is neither a form nor a URL")
	}
	if s.ia == nil {
		return decline("the host takes no session interactions")
	}
	s.mu.Lock()
	s.elicitN++
	in.ID = "elicitation-" + strconv.Itoa(s.elicitN)
	s.mu.Unlock()
	if err := provider.CheckInteraction(in); err != nil {
		return decline("the question cannot be asked: " + err.Error())
	}
	ev.InteractionID = in.ID

	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.asking, cancel)
	defer stop()
	reply, err := s.ia.Interact(ictx, s.id, in)
	switch {
	case err != nil && ictx.Err() != nil:
		ev.Outcome, ev.Reason = "cancelled", "the session closed, or the agent gave up, before the person answered"
		return elicitCancel
	case err != nil:
		var ce *provider.ContractError
		if errors.As(err, &ce) {
			ev.Outcome, ev.Reason = "cancelled", "the question was refused: "+string(ce.Code)
		} else {
			ev.Outcome, ev.Reason = "cancelled", "the host could not ask the person"
		}
		return elicitCancel
	case reply.Declined:
		ev.Outcome = "declined"
		return elicitDecline
	}
	ev.Outcome = "accepted"
	accept := &sdk.UnstableCreateElicitationAccept{Action: "accept"}
	if p.Form != nil && (reply.Answer != "" || field.required) {
		accept.Content = map[string]any{field.name: reply.Answer}
	}
	return sdk.UnstableCreateElicitationResponse{Accept: accept}
}
