// Package llm is agentry's port to language models: one method,
// [Model.Generate], over provider-neutral requests and responses, and an
// optional [Streamer] that yields text deltas and tool calls as Go
// iterators.
//
// Adapters live in sub-packages: llm/scripted (offline and deterministic),
// llm/anthropic and llm/openai (also any OpenAI-compatible server).
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
)

// Role is who wrote a message.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool carries one tool result back to the model.
	RoleTool Role = "tool"
)

// Message is one entry of a conversation. It is plain data and survives a
// JSON round trip unchanged.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID and ToolName say which call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	ToolName   string `json:"toolName,omitempty"`
	// IsError marks a tool result that reports a failure.
	IsError bool `json:"isError,omitempty"`
}

// ToolCall is a model's request to run one tool.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ToolDef describes a tool to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Request is one call to a model.
type Request struct {
	System   string
	Messages []Message
	Tools    []ToolDef
	// MaxTokens bounds the answer; 0 lets the adapter choose.
	MaxTokens int
	// NoToolCalls asks the model for an answer without tool calls: the
	// tools are still described (the conversation holds their calls), and
	// the adapter sets the API's tool choice to none.
	NoToolCalls bool
}

// Usage counts tokens.
type Usage struct {
	// InputTokens counts every input token, those read from and written
	// to the provider's prompt cache included.
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	// CacheReadTokens and CacheWriteTokens are the input tokens read from
	// and written to the prompt cache, when the provider says (0 when it
	// does not).
	CacheReadTokens  int `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int `json:"cacheWriteTokens,omitempty"`
}

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{InputTokens: u.InputTokens + o.InputTokens, OutputTokens: u.OutputTokens + o.OutputTokens,
		CacheReadTokens: u.CacheReadTokens + o.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens + o.CacheWriteTokens}
}

// StopReason says why the model stopped.
type StopReason string

const (
	StopEnd       StopReason = "end"        // a final answer
	StopToolUse   StopReason = "tool_use"   // it asks for tool calls
	StopMaxTokens StopReason = "max_tokens" // cut by the token bound
	StopRefusal   StopReason = "refusal"
	StopOther     StopReason = "other"
)

// Response is what a model answered.
type Response struct {
	Text       string
	ToolCalls  []ToolCall
	Usage      Usage
	StopReason StopReason
	// Model is the model that answered, when the provider says.
	Model string
}

// Model generates one response. Implementations are safe for concurrent
// use and stop promptly when ctx ends.
type Model interface {
	Generate(ctx context.Context, req Request) (Response, error)
}

// Chunk is one piece of a streamed response: a text delta, a completed tool
// call, or (last) the whole response with usage and stop reason.
type Chunk struct {
	Text     string
	ToolCall *ToolCall
	Done     *Response
}

// Streamer is an optional interface: a model that can stream yields chunks
// as they arrive. The sequence ends after the Done chunk or at the first
// error; breaking out of it early cancels the request.
type Streamer interface {
	Stream(ctx context.Context, req Request) iter.Seq2[Chunk, error]
}

// Namer is an optional interface: the model's name, for events.
type Namer interface {
	Name() string
}

// NameOf returns m's name when it has one.
func NameOf(m Model) string {
	if n, ok := m.(Namer); ok {
		return n.Name()
	}
	return ""
}

// Collect drains a stream into a Response. When the stream ends without a
// Done chunk, the response is built from what arrived.
func Collect(seq iter.Seq2[Chunk, error]) (Response, error) {
	var text strings.Builder
	var calls []ToolCall
	for c, err := range seq {
		if err != nil {
			return Response{}, err
		}
		if c.Done != nil {
			return *c.Done, nil
		}
		text.WriteString(c.Text)
		if c.ToolCall != nil {
			calls = append(calls, *c.ToolCall)
		}
	}
	if text.Len() == 0 && len(calls) == 0 {
		return Response{}, ErrEmptyStream
	}
	r := Response{Text: text.String(), ToolCalls: calls, StopReason: StopEnd}
	if len(calls) > 0 {
		r.StopReason = StopToolUse
	}
	return r, nil
}

// ErrEmptyStream is returned by Collect for a stream that yielded nothing.
var ErrEmptyStream = errors.New("llm: the model's stream ended without any output")
