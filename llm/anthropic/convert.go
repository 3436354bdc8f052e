package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/internal/wire"
)

// params turns a provider-neutral request into the Messages API's.
func (m *Model) params(req llm.Request) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(m.model),
		MaxTokens: int64(m.maxTokens),
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, d := range req.Tools {
		schema, err := wire.Schema(d.InputSchema)
		if err != nil {
			return p, m.requestError("tool %q: %v", d.Name, err)
		}
		raw, err := json.Marshal(schema)
		if err != nil {
			return p, m.requestError("tool %q: %v", d.Name, err)
		}
		t := anthropic.ToolParam{
			Name:        d.Name,
			InputSchema: param.Override[anthropic.ToolInputSchemaParam](json.RawMessage(raw)),
		}
		if d.Description != "" {
			t.Description = anthropic.String(d.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &t})
	}
	if req.NoToolCalls && len(p.Tools) > 0 {
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
	}
	msgs, err := m.messages(req.Messages)
	if err != nil {
		return p, err
	}
	p.Messages = msgs
	return p, nil
}

func (m *Model) requestError(format string, a ...any) error {
	return &llm.APIError{Provider: "anthropic", Model: m.model, Kind: llm.ErrBadRequest,
		Message: fmt.Sprintf(format, a...), Fix: "fix the request before sending it"}
}

// messages maps the conversation. The API wants every result of an
// assistant's tool calls in the one user message that follows it, results
// before any text, so consecutive tool and user messages are merged.
func (m *Model) messages(in []llm.Message) ([]anthropic.MessageParam, error) {
	var out []anthropic.MessageParam
	user := func(b anthropic.ContentBlockParamUnion) {
		if n := len(out); n > 0 && out[n-1].OfUser != nil {
			out[n-1].OfUser.Content = append(out[n-1].OfUser.Content, b)
			return
		}
		out = append(out, anthropic.NewUserMessage(b))
	}
	for i, msg := range in {
		switch msg.Role {
		case llm.RoleUser:
			if msg.Content == "" {
				return nil, m.requestError("message %d: a user message without text", i)
			}
			user(anthropic.NewTextBlock(msg.Content))
		case llm.RoleTool:
			if msg.ToolCallID == "" {
				return nil, m.requestError("message %d: a tool result without the id of its call", i)
			}
			r := anthropic.ToolResultBlockParam{ToolUseID: msg.ToolCallID}
			if msg.Content != "" {
				r.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: msg.Content}}}
			}
			if msg.IsError {
				r.IsError = anthropic.Bool(true)
			}
			user(anthropic.ContentBlockParamUnion{OfToolResult: &r})
		case llm.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if msg.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(msg.Content))
			}
			for _, c := range msg.ToolCalls {
				args, err := wire.Args(c.Args)
				if err != nil {
					return nil, m.requestError("message %d: tool call %s: %v", i, c.ID, err)
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, args, c.Name))
			}
			if len(blocks) == 0 {
				continue // an empty answer has nothing to send; the API refuses empty content
			}
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		default:
			return nil, m.requestError("message %d: unknown role %q", i, msg.Role)
		}
	}
	return out, nil
}

// usage maps Anthropic's counts: its input_tokens leave out what was
// written to and read from the prompt cache; llm.Usage.InputTokens counts
// every input token, with the cache's share also apart.
func usage(input, cacheWrite, cacheRead, output int64) llm.Usage {
	return llm.Usage{InputTokens: int(input + cacheWrite + cacheRead), OutputTokens: int(output),
		CacheReadTokens: int(cacheRead), CacheWriteTokens: int(cacheWrite)}
}

// response maps a whole message.
func response(msg *anthropic.Message) (llm.Response, error) {
	var text strings.Builder
	r := llm.Response{
		Model:      string(msg.Model),
		StopReason: stopReason(string(msg.StopReason)),
		Usage:      usage(msg.Usage.InputTokens, msg.Usage.CacheCreationInputTokens, msg.Usage.CacheReadInputTokens, msg.Usage.OutputTokens),
	}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			call, err := wire.Call(len(r.ToolCalls)+1, b.ID, b.Name, b.Input)
			if err != nil {
				return llm.Response{}, err
			}
			r.ToolCalls = append(r.ToolCalls, call)
		}
	}
	r.Text = text.String()
	return r, nil
}

// stopReason maps the API's stop_reason.
func stopReason(s string) llm.StopReason {
	switch s {
	case "end_turn", "stop_sequence":
		return llm.StopEnd
	case "tool_use":
		return llm.StopToolUse
	case "max_tokens", "model_context_window_exceeded":
		return llm.StopMaxTokens
	case "refusal":
		return llm.StopRefusal
	}
	return llm.StopOther
}

// streamState follows one stream's events.
type streamState struct {
	calls  wire.Calls
	isTool map[int64]bool
	text   strings.Builder
	resp   llm.Response
}

// event takes one server-sent event and returns the chunk it completes,
// if any.
func (s *streamState) event(ev anthropic.MessageStreamEventUnion) (*llm.Chunk, error) {
	switch ev.Type {
	case "message_start":
		u := ev.Message.Usage
		s.resp.Model = string(ev.Message.Model)
		s.resp.Usage = usage(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens, u.OutputTokens)
	case "content_block_start":
		b := ev.ContentBlock
		switch b.Type {
		case "tool_use":
			if s.isTool == nil {
				s.isTool = map[int64]bool{}
			}
			s.isTool[ev.Index] = true
			return nil, s.calls.Delta(ev.Index, b.ID, b.Name, "")
		case "text":
			if b.Text != "" {
				s.text.WriteString(b.Text)
				return &llm.Chunk{Text: b.Text}, nil
			}
		}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			if ev.Delta.Text == "" {
				return nil, nil
			}
			s.text.WriteString(ev.Delta.Text)
			return &llm.Chunk{Text: ev.Delta.Text}, nil
		case "input_json_delta":
			if s.isTool[ev.Index] {
				return nil, s.calls.Delta(ev.Index, "", "", ev.Delta.PartialJSON)
			}
		}
	case "content_block_stop":
		if !s.isTool[ev.Index] {
			return nil, nil
		}
		call, ok, err := s.calls.Finish(ev.Index)
		if err != nil || !ok {
			return nil, err
		}
		s.resp.ToolCalls = append(s.resp.ToolCalls, call)
		return &llm.Chunk{ToolCall: &call}, nil
	case "message_delta":
		if ev.Delta.StopReason != "" {
			s.resp.StopReason = stopReason(string(ev.Delta.StopReason))
		}
		// The counts in message_delta are running totals.
		if u := ev.Usage; u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens > 0 {
			out := s.resp.Usage.OutputTokens
			s.resp.Usage = usage(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens, 0)
			s.resp.Usage.OutputTokens = out
		}
		if ev.Usage.OutputTokens > 0 {
			s.resp.Usage.OutputTokens = int(ev.Usage.OutputTokens)
		}
	case "message_stop":
		rest, err := s.calls.Rest() // blocks the server never closed
		if err != nil {
			return nil, err
		}
		s.resp.ToolCalls = append(s.resp.ToolCalls, rest...)
		s.resp.Text = s.text.String()
		if s.resp.StopReason == "" {
			s.resp.StopReason = llm.StopOther
		}
		done := s.resp
		return &llm.Chunk{Done: &done}, nil
	}
	return nil, nil
}
