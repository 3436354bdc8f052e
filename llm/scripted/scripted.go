// Package scripted is an offline, deterministic llm.Model for tests, demos
// and the `agentry run` default.
//
// A [Model] built with [New] answers from a fixed script. It keeps no state
// between calls: the step it answers with is the number of assistant
// messages already in the request. So one Model is safe for any number of
// concurrent conversations, and a conversation resumed from a checkpoint —
// in this process or another — picks up at the right step.
//
// [Calculator] is a second offline model: it runs the code found in the
// person's message with the run_code tool and answers with what it printed.
// Neither is a language model, and both say so in their names.
package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/agentry-dev/agentry/llm"
)

// Step is one scripted answer: text, tool calls, or both. A tool call
// without an ID gets call_<step>_<index>; one without arguments gets {}.
type Step struct {
	Text      string
	ToolCalls []llm.ToolCall
}

// ErrOutOfSteps is returned (wrapped) when a conversation asks for a step
// the script does not have.
var ErrOutOfSteps = errors.New("scripted: the script has no step left for this conversation")

// Model replays a script. It is safe for concurrent use.
type Model struct {
	steps []Step
}

// New returns a model that answers the n-th assistant turn of a
// conversation with steps[n].
func New(steps ...Step) *Model {
	m := &Model{steps: make([]Step, len(steps))}
	for i, s := range steps {
		calls := make([]llm.ToolCall, len(s.ToolCalls))
		for j, c := range s.ToolCalls {
			if c.ID == "" {
				c.ID = fmt.Sprintf("call_%d_%d", i, j)
			}
			if len(c.Args) == 0 {
				c.Args = json.RawMessage("{}")
			}
			calls[j] = c
		}
		if len(calls) == 0 {
			calls = nil
		}
		m.steps[i] = Step{Text: s.Text, ToolCalls: calls}
	}
	return m
}

// Name says what this model is.
func (m *Model) Name() string { return "scripted" }

// Len returns the number of steps in the script.
func (m *Model) Len() int { return len(m.steps) }

// Generate answers with the step whose index is the number of assistant
// messages in req. It does not look at anything else in the request.
func (m *Model) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	n := 0
	for i := range req.Messages {
		if req.Messages[i].Role == llm.RoleAssistant {
			n++
		}
	}
	if n >= len(m.steps) {
		return llm.Response{}, fmt.Errorf("%w: step %d was asked for and the script has %d; add steps to scripted.New",
			ErrOutOfSteps, n+1, len(m.steps))
	}
	s := m.steps[n]
	r := llm.Response{Text: s.Text, StopReason: llm.StopEnd, Model: "scripted"}
	if len(s.ToolCalls) > 0 {
		// A copy: callers may keep or change what they are given.
		r.ToolCalls = slices.Clone(s.ToolCalls)
		r.StopReason = llm.StopToolUse
	}
	return r, nil
}

// Streaming returns the same script as a model that also implements
// llm.Streamer: the text arrives word by word, then the tool calls, then
// the whole response.
func (m *Model) Streaming() *Streaming { return &Streaming{m} }

// Streaming is a [Model] that streams. It is safe for concurrent use.
type Streaming struct{ *Model }

// Stream yields the step's text in word-sized chunks, each tool call, and
// a final Done chunk.
func (s *Streaming) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		r, err := s.Generate(ctx, req)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		for w := range strings.SplitAfterSeq(r.Text, " ") {
			if w == "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				yield(llm.Chunk{}, err)
				return
			}
			if !yield(llm.Chunk{Text: w}, nil) {
				return
			}
		}
		for i := range r.ToolCalls {
			if !yield(llm.Chunk{ToolCall: &r.ToolCalls[i]}, nil) {
				return
			}
		}
		yield(llm.Chunk{Done: &r}, nil)
	}
}
