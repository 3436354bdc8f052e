package modelwire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// anthropicMessage is one message of a Messages API request. Content is a
// string or a list of blocks.
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func (m anthropicMessage) blocks() ([]anthropicBlock, error) {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(m.Content, &bs); err != nil {
		return nil, err
	}
	return bs, nil
}

// resultText reads a tool_result's content: a string or text blocks.
// userParts reads a message for soFar: a user message's text blocks and
// how many tool results it carries.
func userParts(role string, blocks []anthropicBlock) (texts []string, results int, ok bool) {
	if role != "user" {
		return nil, 0, false
	}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_result":
			results++
		}
	}
	return texts, results, true
}

func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var bs []anthropicBlock
	_ = json.Unmarshal(raw, &bs)
	var b strings.Builder
	for _, x := range bs {
		b.WriteString(x.Text)
	}
	return b.String()
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		s.refuse(w, http.StatusNotFound, "not_found_error", "Not Found")
		return
	}
	if s.opt.APIKey != "" && r.Header.Get("X-Api-Key") != s.opt.APIKey && r.Header.Get("Authorization") != "Bearer "+s.opt.APIKey {
		s.refuse(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	var req struct {
		Model     string             `json:"model"`
		MaxTokens int                `json:"max_tokens"`
		Messages  []anthropicMessage `json:"messages"`
		Tools     []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		Stream bool            `json:"stream"`
		System json.RawMessage `json:"system"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "the body is not valid JSON")
		return
	}
	if req.Model == "" || req.MaxTokens <= 0 || len(req.Messages) == 0 {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "model, max_tokens and messages are required")
		return
	}
	rec := Request{Stream: req.Stream, Body: body}
	for _, t := range req.Tools {
		if len(t.InputSchema) == 0 {
			s.refuse(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("tools.%s.input_schema: Field required", t.Name))
			return
		}
		rec.Tools = append(rec.Tools, t.Name)
	}
	all := make([][]anthropicBlock, len(req.Messages))
	for i, m := range req.Messages {
		bs, err := m.blocks()
		if err != nil {
			s.refuse(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages.%d.content: Input should be a valid list", i))
			return
		}
		all[i] = bs
	}
	if msg := anthropicUnanswered(req.Messages, all); msg != "" {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	u := answered(req.Messages)
	if req.Messages[u].Role != "user" {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "the last message must be from the user, or an assistant prefill after one (the roles were "+roles(req.Messages)+")")
		return
	}
	var text strings.Builder
	var results []string
	failed := false
	for _, b := range all[u] {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_result":
			results = append(results, resultText(b.Content))
			failed = failed || b.IsError
		}
	}
	rec.ToolResults = results
	s.record(rec)

	if s.opt.Script != nil {
		s.mu.Lock()
		n := len(s.requests)
		s.mu.Unlock()
		sys := anthropicMessage{Content: req.System}
		var sysText strings.Builder
		if len(req.System) > 0 {
			if bs, err := sys.blocks(); err == nil {
				for _, b := range bs {
					sysText.WriteString(b.Text)
				}
			}
		}
		asked, answered := soFar(len(all), func(i int) ([]string, int, bool) { return userParts(req.Messages[i].Role, all[i]) })
		sr := s.opt.Script(Turn{N: n, Message: text.String(), ToolResults: results, ToolErrors: failed,
			Asked: strings.Join(asked, ""), AskedParts: asked, Answered: answered, Tools: rec.Tools, System: sysText.String(), Stream: req.Stream, Model: req.Model})
		s.anthropicScripted(w, req.Model, req.Stream, sr)
		return
	}
	rep := s.decide(text.String(), results, failed, rec.Tools, "toolu_01")
	if req.Stream {
		s.anthropicStream(w, req.Model, rep)
		return
	}
	s.anthropicReply(w, req.Model, rep, len(body))
}

// anthropicUnanswered is the API's refusal when a tool_use is not answered
// by a tool_result in the next message, or "" when every one is.
func anthropicUnanswered(msgs []anthropicMessage, all [][]anthropicBlock) string {
	for i, bs := range all {
		for _, b := range bs {
			if b.Type != "tool_use" {
				continue
			}
			answered := i+1 < len(all) && msgs[i+1].Role == "user" && slices.ContainsFunc(all[i+1], func(x anthropicBlock) bool {
				return x.Type == "tool_result" && x.ToolUseID == b.ID
			})
			if !answered {
				return fmt.Sprintf("messages.%d: tool_use ids were found without tool_result blocks immediately after: %s", i, b.ID)
			}
		}
	}
	return ""
}

// anthropicReply writes a whole (not streamed) message for rep.
func (s *Server) anthropicReply(w http.ResponseWriter, model string, rep reply, bodyLen int) {
	var content []any
	stop := "end_turn"
	if rep.callID != "" {
		content = append(content, map[string]any{"type": "tool_use", "id": rep.callID, "name": ToolName, "input": json.RawMessage(rep.args)})
		stop = "tool_use"
	} else {
		content = append(content, map[string]any{"type": "text", "text": rep.text})
	}
	writeJSON(w, map[string]any{
		"id": s.nextCallID("msg_01"), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": bodyLen / 4, "output_tokens": 12},
	})
}

func (s *Server) anthropicStream(w http.ResponseWriter, model string, rep reply) {
	e := newSSE(w)
	e.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.nextCallID("msg_01"), "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 25, "output_tokens": 1},
	}})
	stop := "end_turn"
	if rep.callID != "" {
		stop = "tool_use"
		e.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": rep.callID, "name": ToolName, "input": map[string]any{}}})
		e.send("ping", `{"type": "ping"}`)
		for _, part := range halves(rep.args) {
			e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
		}
	} else {
		e.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		for _, part := range words(rep.text) {
			e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": part}})
		}
	}
	e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 12}})
	e.send("message_stop", `{"type":"message_stop"}`)
}

// anthropicScripted sends a scripted model's reply, whole or streamed.
func (s *Server) anthropicScripted(w http.ResponseWriter, model string, stream bool, rep Reply) {
	type block struct {
		text string
		id   string
		call Call
	}
	var blocks []block
	if rep.Text != "" || len(rep.Calls) == 0 {
		blocks = append(blocks, block{text: rep.Text})
	}
	for _, c := range rep.Calls {
		args := c.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		blocks = append(blocks, block{id: s.nextCallID("toolu_01"), call: Call{Name: c.Name, Args: args}})
	}
	stop := "end_turn"
	if len(rep.Calls) > 0 {
		stop = "tool_use"
	}
	id := s.nextCallID("msg_01")
	if !stream {
		var content []any
		for _, b := range blocks {
			if b.id == "" {
				content = append(content, map[string]any{"type": "text", "text": b.text})
			} else {
				content = append(content, map[string]any{"type": "tool_use", "id": b.id, "name": b.call.Name, "input": b.call.Args})
			}
		}
		writeJSON(w, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": 25, "output_tokens": 12},
		})
		return
	}
	e := newSSE(w)
	e.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 25, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
	}})
	for i, b := range blocks {
		if b.id == "" {
			e.send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, part := range words(b.text) {
				e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": part}})
			}
		} else {
			e.send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.id, "name": b.call.Name, "input": map[string]any{}}})
			e.send("ping", `{"type": "ping"}`)
			for _, part := range halves(string(b.call.Args)) {
				e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		}
		e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	e.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 12}})
	e.send("message_stop", `{"type":"message_stop"}`)
}

// answered is the index of the message the model answers: the last user
// message, before an assistant prefill (which the API continues) and the
// system messages a client appends mid-conversation (Claude Code 0.3
// sends both).
func answered(msgs []anthropicMessage) int {
	u := len(msgs) - 1
	for u > 0 && msgs[u].Role == "system" {
		u--
	}
	if msgs[u].Role == "assistant" && u > 0 {
		u--
	}
	return u
}

func roles(msgs []anthropicMessage) string {
	rs := make([]string, len(msgs))
	for i, m := range msgs {
		rs[i] = m.Role
	}
	return strings.Join(rs, ",")
}
