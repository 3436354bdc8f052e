package modelwire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// responsesItem is one item of a Responses API request's input: a message
// (content a string or a list of parts), a function call the model made,
// or a function call's output (a string or a list of parts).
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	CallID  string          `json:"call_id"`
	Name    string          `json:"name"`
	Output  json.RawMessage `json:"output"`
	// Tools are an additional_tools item's: tools, or namespaces of them.
	Tools []responsesTool `json:"tools"`
}

// responsesTool is a tool a request offers: a function, a custom
// (freeform) tool, a built-in one named by its type, or a namespace of
// tools.
type responsesTool struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"`
}

// toolNames lists the names of the tools offered, those in namespaces
// included, a built-in tool by its type.
func toolNames(ts []responsesTool) []string {
	var out []string
	for _, t := range ts {
		switch {
		case t.Type == "namespace":
			out = append(out, toolNames(t.Tools)...)
		case t.Name != "":
			out = append(out, t.Name)
		default:
			out = append(out, t.Type)
		}
	}
	return out
}

// partsText reads a content or output field: a string, or parts with text.
func partsText(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []struct {
		Type, Text string
	}
	_ = json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return out
}

// isCall says whether an item is a call the model made, and isOutput
// whether it answers one.
func (it responsesItem) isCall() bool {
	return it.Type == "function_call" || it.Type == "custom_tool_call"
}

func (it responsesItem) isOutput() bool {
	return it.Type == "function_call_output" || it.Type == "custom_tool_call_output"
}

// responsesUnanswered is the API's refusal when a call in the input has no
// output after it, or an output answers no call before it; "" when the
// input is well formed.
func responsesUnanswered(input []responsesItem) string {
	calls := map[string]bool{}
	for _, it := range input {
		switch {
		case it.isCall():
			calls[it.CallID] = false
		case it.isOutput():
			if _, ok := calls[it.CallID]; !ok {
				return fmt.Sprintf("No tool call found for function call output with call_id %s.", it.CallID)
			}
			calls[it.CallID] = true
		}
	}
	for id, answered := range calls {
		if !answered {
			return fmt.Sprintf("No tool output found for function call %s.", id)
		}
	}
	return ""
}

// responses serves OpenAI's Responses API (POST /v1/responses), the wire
// format Codex speaks: a request's input items become a Turn for the
// script, and its Reply goes back as the API streams one (server-sent
// events from response.created to response.completed, which carries the
// usage) or as one response object.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		s.refuse(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	if s.opt.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opt.APIKey {
		s.refuse(w, http.StatusUnauthorized, "invalid_request_error", "Incorrect API key provided.")
		return
	}
	var req struct {
		Model        string          `json:"model"`
		Instructions string          `json:"instructions"`
		Input        json.RawMessage `json:"input"`
		Tools        []responsesTool `json:"tools"`
		Stream       bool            `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "We could not parse the JSON body of your request.")
		return
	}
	var input []responsesItem
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		input = []responsesItem{{Type: "message", Role: "user", Content: req.Input}}
	} else if err := json.Unmarshal(req.Input, &input); err != nil {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "Invalid type for 'input': expected a string or an array of input items.")
		return
	}
	if req.Model == "" || len(input) == 0 {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", "Missing required parameter: 'model' and 'input'.")
		return
	}
	if msg := responsesUnanswered(input); msg != "" {
		s.refuse(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	rec := Request{Path: r.URL.Path, Stream: req.Stream, Body: body}
	rec.Tools = toolNames(req.Tools)
	for _, it := range input {
		if it.Type == "additional_tools" {
			rec.Tools = append(rec.Tools, toolNames(it.Tools)...)
		}
	}
	// The outputs that end the input answer the model's last calls.
	i := len(input)
	for i > 0 && (input[i-1].isOutput() || input[i-1].isCall()) {
		i--
	}
	for _, it := range input[i:] {
		if it.isOutput() {
			rec.ToolResults = append(rec.ToolResults, strings.Join(partsText(it.Output), ""))
		}
	}
	s.record(rec)
	s.mu.Lock()
	n := len(s.requests)
	s.mu.Unlock()
	asked, answered := soFar(len(input), func(i int) ([]string, int, bool) {
		switch it := input[i]; {
		case it.isOutput():
			return nil, 1, true
		case it.Type == "message" && it.Role == "user" || it.Type == "" && it.Role == "user":
			return partsText(it.Content), 0, true
		}
		return nil, 0, false
	})
	last := ""
	if it := input[len(input)-1]; it.Role == "user" {
		last = strings.Join(partsText(it.Content), "")
	}
	turn := Turn{N: n, Message: last, ToolResults: rec.ToolResults, Asked: strings.Join(asked, ""), AskedParts: asked,
		Answered: answered, Tools: rec.Tools, System: req.Instructions, Stream: req.Stream}
	var rep Reply
	if s.opt.Script != nil {
		rep = s.opt.Script(turn)
	} else if d := s.decide(last, rec.ToolResults, false, rec.Tools, "call_"); d.callID != "" {
		rep = Reply{Calls: []Call{{Name: ToolName, Args: json.RawMessage(d.args)}}}
	} else {
		rep = Reply{Text: d.text}
	}
	s.responsesReply(w, req.Model, req.Stream, rep, len(body))
}

// responsesReply writes rep as a response: its output items are a
// message with the text (when there is text), then one function_call per
// call; streamed, each item is added, its text or arguments come in
// deltas, and it is done, and response.completed ends the stream.
func (s *Server) responsesReply(w http.ResponseWriter, model string, stream bool, rep Reply, bodyLen int) {
	id := s.nextCallID("resp_")
	created := time.Now().Unix()
	var items []map[string]any
	if rep.Text != "" {
		items = append(items, map[string]any{"type": "message", "id": s.nextCallID("msg_"), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": rep.Text, "annotations": []any{}}}})
	}
	for _, c := range rep.Calls {
		if c.Input != "" {
			items = append(items, map[string]any{"type": "custom_tool_call", "id": s.nextCallID("ctc_"), "status": "completed",
				"call_id": s.nextCallID("call_"), "name": c.Name, "input": c.Input})
			continue
		}
		args := string(c.Args)
		if args == "" {
			args = "{}"
		}
		items = append(items, map[string]any{"type": "function_call", "id": s.nextCallID("fc_"), "status": "completed",
			"call_id": s.nextCallID("call_"), "name": c.Name, "arguments": args})
	}
	usage := map[string]any{"input_tokens": bodyLen / 4, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": 12, "output_tokens_details": map[string]int{"reasoning_tokens": 0}, "total_tokens": bodyLen/4 + 12}
	response := func(status string, output []map[string]any, u any) map[string]any {
		return map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": model,
			"output": output, "usage": u, "error": nil, "incomplete_details": nil}
	}
	if !stream {
		writeJSON(w, response("completed", items, usage))
		return
	}
	e := newSSE(w)
	seq := 0
	send := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		e.send(typ, fields)
	}
	send("response.created", map[string]any{"response": response("in_progress", []map[string]any{}, nil)})
	for i, it := range items {
		added := map[string]any{}
		for k, v := range it {
			added[k] = v
		}
		added["status"] = "in_progress"
		switch it["type"] {
		case "message":
			added["content"] = []any{}
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for _, part := range words(rep.Text) {
				send("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": part})
			}
			send("response.output_text.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "text": rep.Text})
		case "function_call":
			added["arguments"] = ""
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for _, part := range halves(it["arguments"].(string)) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": part})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": i, "arguments": it["arguments"]})
		case "custom_tool_call":
			added["input"] = ""
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for _, part := range halves(it["input"].(string)) {
				send("response.custom_tool_call_input.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": part})
			}
			send("response.custom_tool_call_input.done", map[string]any{"item_id": it["id"], "output_index": i, "input": it["input"]})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	send("response.completed", map[string]any{"response": response("completed", items, usage)})
}
