package modelwire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

type openaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text reads a message's content: a string, null, or a list of parts.
func (m openaiMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type, Text string
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (s *Server) openai(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("404 page not found"))
		return
	}
	if s.opt.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opt.APIKey {
		s.refuse(w, http.StatusUnauthorized, "invalid_request_error", "Incorrect API key provided.")
		return
	}
	var req struct {
		Model    string          `json:"model"`
		Messages []openaiMessage `json:"messages"`
		Tools    []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "We could not parse the JSON body of your request.")
		return
	}
	if req.Model == "" || len(req.Messages) == 0 {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "'model' and 'messages' are required")
		return
	}
	rec := Request{Stream: req.Stream, Body: body}
	for _, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			s.refuse(w, http.StatusBadRequest, "invalid_request_error", "every tool must be a function with a name")
			return
		}
		rec.Tools = append(rec.Tools, t.Function.Name)
	}
	for i, m := range req.Messages {
		if m.Role == "tool" && (i == 0 || (req.Messages[i-1].Role != "tool" && len(req.Messages[i-1].ToolCalls) == 0)) {
			s.refuse(w, http.StatusBadRequest, "invalid_request_error",
				"Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'.")
			return
		}
		for _, c := range m.ToolCalls {
			answered := false
			for _, n := range req.Messages[i+1:] {
				if n.Role != "tool" {
					break
				}
				answered = answered || n.ToolCallID == c.ID
			}
			if !answered || !json.Valid([]byte(c.Function.Arguments)) {
				s.refuse(w, http.StatusBadRequest, "invalid_request_error",
					fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id', with arguments that are JSON: %s", c.ID))
				return
			}
		}
	}
	// The tool results that end the conversation answer the model's last
	// calls; otherwise the last message is the person's.
	var results []string
	i := len(req.Messages)
	for i > 0 && req.Messages[i-1].Role == "tool" {
		i--
	}
	for _, m := range req.Messages[i:] {
		results = append(results, m.text())
	}
	lastUser := ""
	if len(results) == 0 {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "user" {
			s.refuse(w, http.StatusBadRequest, "invalid_request_error", "the last message must be from the user or a tool")
			return
		}
		lastUser = last.text()
	}
	rec.ToolResults = results
	s.record(rec)

	// Chat Completions has no error flag on a tool message; the content says.
	rep := s.decide(lastUser, results, false, rec.Tools, "call_")
	id := s.nextCallID("chatcmpl-")
	created := time.Now().Unix()
	if req.Stream {
		s.openaiStream(w, id, created, req.Model, rep, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	msg := map[string]any{"role": "assistant", "content": rep.text, "refusal": nil}
	finish := "stop"
	if rep.callID != "" {
		msg["content"] = nil
		msg["tool_calls"] = []any{map[string]any{"id": rep.callID, "type": "function",
			"function": map[string]string{"name": ToolName, "arguments": rep.args}}}
		finish = "tool_calls"
	}
	writeJSON(w, map[string]any{
		"id": id, "object": "chat.completion", "created": created, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": len(body) / 4, "completion_tokens": 12, "total_tokens": len(body)/4 + 12},
	})
}

func (s *Server) openaiStream(w http.ResponseWriter, id string, created int64, model string, rep reply, usage bool) {
	e := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	finish := "stop"
	if rep.callID != "" {
		finish = "tool_calls"
		e.send("", chunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"index": 0, "id": rep.callID, "type": "function", "function": map[string]string{"name": ToolName, "arguments": ""}}}}, nil))
		for _, part := range halves(rep.args) {
			e.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": 0, "function": map[string]string{"arguments": part}}}}, nil))
		}
	} else {
		e.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		for _, part := range words(rep.text) {
			e.send("", chunk(map[string]any{"content": part}, nil))
		}
	}
	e.send("", chunk(map[string]any{}, finish))
	if usage {
		e.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": map[string]int{"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}})
	}
	e.send("", "[DONE]")
}
