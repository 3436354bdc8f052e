package openai

import (
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/internal/wire"
)

// errorPrefix marks a tool result that reports a failure: the Chat
// Completions API has no field for it, so the model reads it in the text.
const errorPrefix = "error: "

// params turns a provider-neutral request into the Chat Completions API's.
func (m *Model) params(req llm.Request, stream bool) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: m.model}
	if n := req.MaxTokens; n > 0 || m.maxTokens > 0 {
		if n <= 0 {
			n = m.maxTokens
		}
		if m.official {
			p.MaxCompletionTokens = openai.Int(int64(n))
		} else {
			p.MaxTokens = openai.Int(int64(n))
		}
	}
	if stream {
		p.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	for _, d := range req.Tools {
		schema, err := wire.Schema(d.InputSchema)
		if err != nil {
			return p, m.requestError("tool %q: %v", d.Name, err)
		}
		params := make(shared.FunctionParameters, len(schema))
		for k, v := range schema {
			params[k] = v
		}
		fn := shared.FunctionDefinitionParam{Name: d.Name, Parameters: params}
		if d.Description != "" {
			fn.Description = openai.String(d.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	if req.NoToolCalls && len(p.Tools) > 0 {
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case llm.RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(msg.Content))
		case llm.RoleTool:
			if msg.ToolCallID == "" {
				return p, m.requestError("message %d: a tool result without the id of its call", i)
			}
			content := msg.Content
			if msg.IsError {
				content = errorPrefix + content
			}
			p.Messages = append(p.Messages, openai.ToolMessage(content, msg.ToolCallID))
		case llm.RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if msg.Content != "" {
				a.Content.OfString = openai.String(msg.Content)
			}
			for _, c := range msg.ToolCalls {
				args, err := wire.Args(c.Args)
				if err != nil {
					return p, m.requestError("message %d: tool call %s: %v", i, c.ID, err)
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: string(args)},
					},
				})
			}
			if msg.Content == "" && len(a.ToolCalls) == 0 {
				continue // an empty answer has nothing to send
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return p, m.requestError("message %d: unknown role %q", i, msg.Role)
		}
	}
	return p, nil
}

func (m *Model) requestError(format string, a ...any) error {
	return &llm.APIError{Provider: m.provider, Model: m.model, Kind: llm.ErrBadRequest,
		Message: fmt.Sprintf(format, a...), Fix: "fix the request before sending it"}
}

// usage maps OpenAI's counts: prompt_tokens include the ones read from the
// prompt cache (prompt_tokens_details.cached_tokens); OpenAI does not
// count cache writes.
func usage(u openai.CompletionUsage) llm.Usage {
	return llm.Usage{InputTokens: int(u.PromptTokens), OutputTokens: int(u.CompletionTokens),
		CacheReadTokens: int(u.PromptTokensDetails.CachedTokens)}
}

// response maps a whole completion's first choice.
func response(cc *openai.ChatCompletion) (llm.Response, error) {
	ch := cc.Choices[0]
	r := llm.Response{
		Model: cc.Model,
		Text:  ch.Message.Content,
		Usage: usage(cc.Usage),
	}
	refusal := false
	if r.Text == "" && ch.Message.Refusal != "" {
		r.Text, refusal = ch.Message.Refusal, true
	}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue // custom (grammar) tools are never declared by us
		}
		call, err := wire.Call(len(r.ToolCalls)+1, tc.ID, tc.Function.Name, []byte(tc.Function.Arguments))
		if err != nil {
			return llm.Response{}, err
		}
		r.ToolCalls = append(r.ToolCalls, call)
	}
	r.StopReason = stopReason(ch.FinishReason, len(r.ToolCalls) > 0, refusal)
	return r, nil
}

// stopReason maps finish_reason. Some servers (older Ollama) say "stop"
// when the message holds tool calls; the calls decide.
func stopReason(finish string, calls, refusal bool) llm.StopReason {
	switch {
	case finish == "length":
		return llm.StopMaxTokens
	case finish == "content_filter" || refusal:
		return llm.StopRefusal
	case calls || finish == "tool_calls" || finish == "function_call":
		return llm.StopToolUse
	case finish == "stop":
		return llm.StopEnd
	}
	return llm.StopOther
}

// streamState follows one stream's chunks.
type streamState struct {
	calls   wire.Calls
	text    strings.Builder
	resp    llm.Response
	finish  string
	refusal bool
	sent    int // tool calls already yielded
}

// chunk takes one streamed chunk and returns what it completes: text
// deltas, and the tool calls once the choice has finished.
func (s *streamState) chunk(ck openai.ChatCompletionChunk) ([]llm.Chunk, error) {
	if ck.Model != "" {
		s.resp.Model = ck.Model
	}
	if ck.JSON.Usage.Valid() {
		s.resp.Usage = usage(ck.Usage)
	}
	var out []llm.Chunk
	for _, ch := range ck.Choices {
		if ch.Index != 0 {
			continue // we ask for one choice
		}
		d := ch.Delta
		if d.Content != "" {
			s.text.WriteString(d.Content)
			out = append(out, llm.Chunk{Text: d.Content})
		}
		if d.Refusal != "" {
			s.refusal = true
			s.text.WriteString(d.Refusal)
			out = append(out, llm.Chunk{Text: d.Refusal})
		}
		for _, tc := range d.ToolCalls {
			if err := s.calls.Delta(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments); err != nil {
				return nil, err
			}
		}
		if ch.FinishReason != "" {
			s.finish = ch.FinishReason
			rest, err := s.calls.Rest()
			if err != nil {
				return nil, err
			}
			s.resp.ToolCalls = append(s.resp.ToolCalls, rest...)
			for i := range rest {
				out = append(out, llm.Chunk{ToolCall: &rest[i]})
			}
			s.sent = len(s.resp.ToolCalls)
		}
	}
	return out, nil
}

// done is the whole response once the stream has ended, nil when the
// server never said the choice was finished.
func (s *streamState) done() (*llm.Response, error) {
	if s.finish == "" {
		return nil, nil
	}
	rest, err := s.calls.Rest() // pieces that came after finish_reason
	if err != nil {
		return nil, err
	}
	s.resp.ToolCalls = append(s.resp.ToolCalls, rest...)
	s.resp.Text = s.text.String()
	s.resp.StopReason = stopReason(s.finish, len(s.resp.ToolCalls) > 0, s.refusal)
	r := s.resp
	return &r, nil
}
