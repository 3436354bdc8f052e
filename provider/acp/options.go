package acp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/coder/acp-go-sdk"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentry-dev/agentry/event"
)

// TypeSessionModels reports the models an agent offers a session it
// opened (its model option of session/set_config_option) and the one the
// session runs with: how a host lists what a conversation may choose.
const TypeSessionModels event.Type = "agentry.acp.session_models"

// SessionModels is the payload of [TypeSessionModels].
type SessionModels struct {
	// Option is the id of the agent's model option.
	Option string `json:"option"`
	// Current is the model the session runs with, after the
	// configuration's choice was applied.
	Current string `json:"current"`
	// Offered are the values the agent accepts, in its order.
	Offered []string `json:"offered"`
}

func init() {
	event.Register(TypeSessionModels, func() any { return new(SessionModels) })
}

// modelOption finds the agent's model option among a session's
// configuration options: the select whose category is model, else the
// one whose id is "model".
func modelOption(options []sdk.SessionConfigOption) *sdk.SessionConfigOptionSelect {
	var byID *sdk.SessionConfigOptionSelect
	for _, o := range options {
		sel := o.Select
		if sel == nil {
			continue
		}
		if sel.Category != nil && *sel.Category == sdk.SessionConfigOptionCategoryModel {
			return sel
		}
		if sel.Id == "model" && byID == nil {
			byID = sel
		}
	}
	return byID
}

// selectValues lists the values a select option accepts, grouped or not.
func selectValues(sel *sdk.SessionConfigOptionSelect) []string {
	var out []string
	add := func(opts []sdk.SessionConfigSelectOption) {
		for _, o := range opts {
			out = append(out, string(o.Value))
		}
	}
	if u := sel.Options.Ungrouped; u != nil {
		add(*u)
	}
	if g := sel.Options.Grouped; g != nil {
		for _, grp := range *g {
			add(grp.Options)
		}
	}
	return out
}

// setModel switches the session to model (when set) through the agent's
// model option, refusing a model the agent does not offer, and reports
// the models offered and the one in use.
func (s *session) setModel(ctx context.Context, options []sdk.SessionConfigOption, model string) error {
	sel := modelOption(options)
	if sel == nil {
		if model != "" {
			return fmt.Errorf("acp: the configuration names the model %q but the agent offers no model option (session/set_config_option); remove model", model)
		}
		return nil
	}
	offered := selectValues(sel)
	current := string(sel.CurrentValue)
	if model != "" && model != current {
		if !slices.Contains(offered, model) {
			return fmt.Errorf("acp: the agent offers no model %q; it offers %s", model, strings.Join(offered, ", "))
		}
		req := sdk.SetSessionConfigOptionRequest{ValueId: &sdk.SetSessionConfigOptionValueId{
			SessionId: sdk.SessionId(s.boundTo()), ConfigId: sel.Id, Value: sdk.SessionConfigValueId(model)}}
		if _, err := s.ag.conn.SetSessionConfigOption(ctx, req); err != nil {
			return s.ag.failure("session/set_config_option", err)
		}
		current = model
		s.noteModelID(current)
	}
	s.mu.Lock()
	unnamed := s.model == ""
	s.mu.Unlock()
	if unnamed {
		// An agent that names its model only in its model option (no
		// session models): the turns' usage is that model's.
		s.noteModelID(current)
	}
	s.emit(TypeSessionModels, &SessionModels{Option: string(sel.Id), Current: current, Offered: offered})
	return nil
}

// traceMeta carries the turn's trace context to the agent as ACP's
// _meta.traceparent (and tracestate), W3C Trace Context, so the agent's
// spans join the host's trace; nil when the context holds no span.
func traceMeta(ctx context.Context) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	meta := map[string]any{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := carrier.Get(k); v != "" {
			meta[k] = v
		}
	}
	return meta
}
