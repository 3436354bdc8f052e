package modelwire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Gemini API as Gemini CLI calls it through @google/genai: POST
// /v1beta/models/{model}:generateContent (one JSON answer),
// :streamGenerateContent?alt=sse (server-sent events, one
// GenerateContentResponse each) and :countTokens. Options.Script plays
// the model, shown each request as a Turn.
//
// Like the real API it refuses, with Google's error shape, a wrong
// x-goog-api-key, a request with no contents, a stream without alt=sse,
// and a functionResponse that answers no functionCall of the turn before
// it.

type geminiPart struct {
	Text         string `json:"text,omitempty"`
	Thought      bool   `json:"thought,omitempty"`
	FunctionCall *struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		ID       string          `json:"id,omitempty"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

func (c geminiContent) text() string {
	var b strings.Builder
	for _, p := range c.Parts {
		if !p.Thought {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// userParts reads a user content for soFar: its text parts (thoughts
// left out) and how many function responses it carries.
func (c geminiContent) userParts() (texts []string, results int, ok bool) {
	if c.Role != "user" {
		return nil, 0, false
	}
	for _, p := range c.Parts {
		if p.FunctionResponse != nil {
			results++
		}
		if p.Text != "" && !p.Thought {
			texts = append(texts, p.Text)
		}
	}
	return texts, results, true
}

func geminiRefuse(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}})
}

func (s *Server) gemini(w http.ResponseWriter, r *http.Request, body []byte) {
	model, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	if r.Method != http.MethodPost || !ok || model == "" || !strings.HasPrefix(r.URL.Path, "/v1beta/models/") {
		geminiRefuse(w, http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.")
		return
	}
	if key := r.Header.Get("x-goog-api-key"); s.opt.APIKey != "" && key != s.opt.APIKey {
		geminiRefuse(w, http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
		return
	}
	var req struct {
		Contents          []geminiContent `json:"contents"`
		SystemInstruction *geminiContent  `json:"systemInstruction"`
		Tools             []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		geminiRefuse(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received.")
		return
	}
	if len(req.Contents) == 0 {
		geminiRefuse(w, http.StatusBadRequest, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified")
		return
	}
	switch method {
	case "countTokens":
		b, _ := json.Marshal(req.Contents)
		writeGeminiJSON(w, map[string]any{"totalTokens": len(b) / 4})
		return
	case "generateContent":
	case "streamGenerateContent":
		if r.URL.Query().Get("alt") != "sse" {
			geminiRefuse(w, http.StatusBadRequest, "INVALID_ARGUMENT", "this server streams server-sent events only: add alt=sse")
			return
		}
	default:
		geminiRefuse(w, http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.")
		return
	}

	turn := Turn{Stream: method == "streamGenerateContent"}
	for _, t := range req.Tools {
		for _, f := range t.FunctionDeclarations {
			turn.Tools = append(turn.Tools, f.Name)
		}
	}
	if req.SystemInstruction != nil {
		turn.System = req.SystemInstruction.text()
	}
	for i, c := range req.Contents {
		for _, p := range c.Parts {
			if p.FunctionResponse == nil {
				continue
			}
			if !answersCall(req.Contents[:i], p.FunctionResponse.Name) {
				geminiRefuse(w, http.StatusBadRequest, "INVALID_ARGUMENT",
					fmt.Sprintf("Please ensure that function response turn comes immediately after a function call turn (%s).", p.FunctionResponse.Name))
				return
			}
		}
	}
	last := req.Contents[len(req.Contents)-1]
	if last.Role != "user" {
		geminiRefuse(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Please ensure that the last turn is from the user.")
		return
	}
	turn.Message = last.text()
	for _, p := range last.Parts {
		if p.FunctionResponse != nil {
			turn.ToolResults = append(turn.ToolResults, string(p.FunctionResponse.Response))
			turn.ToolErrors = turn.ToolErrors || strings.Contains(string(p.FunctionResponse.Response), `"error"`)
		}
	}
	turn.AskedParts, turn.Answered = soFar(len(req.Contents), func(i int) ([]string, int, bool) { return req.Contents[i].userParts() })
	turn.Asked = strings.Join(turn.AskedParts, "")
	s.record(Request{Path: r.URL.Path, Stream: turn.Stream, Tools: turn.Tools, ToolResults: turn.ToolResults, Body: body})
	s.mu.Lock()
	turn.N = len(s.requests)
	s.mu.Unlock()
	geminiReply(w, model, turn, s.opt.Script(turn))
}

// geminiReply writes rep: one GenerateContentResponse, or for a stream
// the text in pieces and each call whole.
func geminiReply(w http.ResponseWriter, model string, turn Turn, rep Reply) {
	var parts []map[string]any
	if rep.Text != "" {
		parts = append(parts, map[string]any{"text": rep.Text})
	}
	for _, c := range rep.Calls {
		parts = append(parts, map[string]any{"functionCall": map[string]any{"name": c.Name, "args": c.Args}})
	}
	chunk := func(parts []map[string]any, finish bool) map[string]any {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		out := map[string]any{"candidates": []any{cand}, "modelVersion": model, "responseId": fmt.Sprintf("resp-%d", turn.N)}
		if finish {
			cand["finishReason"] = "STOP"
			out["usageMetadata"] = map[string]int{"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}
		}
		return out
	}
	if !turn.Stream {
		writeGeminiJSON(w, chunk(parts, true))
		return
	}
	// The real stream sends text in pieces and each call whole, the last
	// event carrying the finish reason and the usage.
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	var events [][]map[string]any
	for _, word := range strings.SplitAfter(rep.Text, " ") {
		if word != "" {
			events = append(events, []map[string]any{{"text": word}})
		}
	}
	for _, p := range parts {
		if _, ok := p["functionCall"]; ok {
			events = append(events, []map[string]any{p})
		}
	}
	if len(events) == 0 {
		events = append(events, []map[string]any{{"text": ""}})
	}
	for i, e := range events {
		b, _ := json.Marshal(chunk(e, i == len(events)-1))
		fmt.Fprintf(w, "data: %s\r\n\r\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// answersCall says whether the turn just before a functionResponse is the
// model's, calling that function.
func answersCall(before []geminiContent, name string) bool {
	if len(before) == 0 || before[len(before)-1].Role != "model" {
		return false
	}
	for _, p := range before[len(before)-1].Parts {
		if p.FunctionCall != nil && p.FunctionCall.Name == name {
			return true
		}
	}
	return false
}

func writeGeminiJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(v)
}
