package acp

import (
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
)

// noteModel keeps the model the agent says a session uses, for the
// turns' usage.
func (s *session) noteModel(m *sdk.SessionModelState) {
	if m == nil {
		return
	}
	s.noteModelID(string(m.CurrentModelId))
}

// noteModelID keeps id as the model the session uses.
func (s *session) noteModelID(id string) {
	s.mu.Lock()
	s.model = id
	s.mu.Unlock()
}

// usage is the turn's usage output: the agent's wall time on the turn,
// and the tokens its prompt response reported — the turn's own, or (for
// an agent configured with UsageTotals) the difference from the totals it
// reported before. An agent that reported nothing has basis "none".
func (s *session) usage(t *turn) provider.Output {
	u := llm.TurnUsage{Duration: time.Since(t.began), AgentWall: time.Since(t.began), Basis: llm.BasisNone}
	s.mu.Lock()
	model, rep := s.model, t.resp.Usage
	if rep != nil && t.err == nil {
		now := tokens(rep)
		u.Basis = llm.BasisPerTurn
		if s.in.cfg.UsageTotals {
			u.Basis = llm.BasisCumulative
			if s.totals != nil {
				now = since(now, tokens(s.totals))
			}
			r := *rep
			s.totals = &r
		}
		u.ModelCalls = 1 // at least one; the agent does not say how many
		u.Models = map[string]llm.Usage{model: now}
	}
	s.mu.Unlock()
	return s.output(provider.OutputUsage, t.id, func(o *provider.Output) { o.Usage = &u })
}

// tokens maps an ACP usage report to the port's counts: InputTokens
// counts every input token, the cached ones included (ACP reports them
// beside the input tokens).
func tokens(r *sdk.Usage) llm.Usage {
	u := llm.Usage{InputTokens: r.InputTokens, OutputTokens: r.OutputTokens}
	if r.CachedReadTokens != nil {
		u.CacheReadTokens = *r.CachedReadTokens
	}
	if r.CachedWriteTokens != nil {
		u.CacheWriteTokens = *r.CachedWriteTokens
	}
	u.InputTokens += u.CacheReadTokens + u.CacheWriteTokens
	return u
}

// since is now less before, each count floored at zero (totals that went
// down mean the agent started counting again: the new totals are the
// turn's).
func since(now, before llm.Usage) llm.Usage {
	if now.InputTokens < before.InputTokens || now.OutputTokens < before.OutputTokens {
		return now
	}
	return llm.Usage{
		InputTokens: now.InputTokens - before.InputTokens, OutputTokens: now.OutputTokens - before.OutputTokens,
		CacheReadTokens: max(0, now.CacheReadTokens-before.CacheReadTokens), CacheWriteTokens: max(0, now.CacheWriteTokens-before.CacheWriteTokens),
	}
}
