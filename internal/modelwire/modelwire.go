// Package modelwire runs local HTTP servers that speak vendors' wire
// formats — Anthropic's Messages API, OpenAI's Chat Completions and
// Responses APIs, as JSON and as server-sent event streams, and Google's
// Gemini API for a scripted model — with a small deterministic model
// behind them that uses a run_code tool. End-to-end tests point the real
// SDKs at it (through llm/anthropic, llm/openai or the agentry command's
// --model); it listens on loopback only and never reaches the internet.
//
// The model plays one two-step tool-calling turn. Given a person's
// message, it asks for run_code with the program [Options.Code] picks.
// Given the tool's result, it answers with that result ("run_code printed:
// 42"). So an answer carries whatever the real tool printed — nothing is
// canned — and a test that finds 42 in it knows real code ran.
//
// Like the vendors, the servers refuse malformed requests with their error
// shapes: a missing model or max_tokens, a tool result that answers no
// tool call, a missing API version header, a wrong key.
package modelwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// ToolName is the tool the model calls.
const ToolName = "run_code"

// Options configure a server.
type Options struct {
	// Code picks the program to run for a person's message (default:
	// always "print(6*7)").
	Code func(message string) string
	// APIKey, when set, is the only key the server accepts.
	APIKey string
	// Script, when set, is the model of the Anthropic and Responses
	// servers instead of the run_code turn, and the Gemini server's only
	// model: it is shown each request and says what to answer — text,
	// calls of any tools with any arguments, or both. The answer is
	// streamed the way the vendor streams (Anthropic: a text block, then
	// one tool_use block per call with its input in pieces; Responses: a
	// message item with the text in deltas, then one item per call with
	// its arguments or input in pieces; Gemini: the text in pieces, each
	// call whole) or sent whole. It is called from the server's goroutines,
	// one call at a time per request. The Chat Completions server does not
	// use it.
	Script func(Turn) Reply
}

// Turn is what a scripted model is shown of one request.
type Turn struct {
	// N counts the requests the server has served, from 1.
	N int
	// Message is the text of the last user message.
	Message string
	// ToolResults are the tool results that message carries, in order,
	// and ToolErrors whether any of them is an error.
	ToolResults []string
	ToolErrors  bool
	// Asked is the text of the person's message the model is answering
	// (the last user message with text and no tool results), and Answered
	// how many tool results have come since it: a script can tell the
	// steps of a turn apart from the request alone, so a request sent again
	// gets the same answer.
	Asked    string
	Answered int
	// AskedParts are the text parts of that message, in order (Asked is
	// them joined): a client that sends a host's note as context of its
	// own puts it in a part before the person's words.
	AskedParts []string
	// Tools names the tools the request offers.
	Tools []string
	// System is the request's system prompt, as text.
	System string
	// Stream says whether the request asked for a stream.
	Stream bool
	// Model is the model the request names (the Messages API's "model").
	Model string
}

// Reply is a scripted model's answer: Text (may be empty when there are
// calls), then Calls in order.
type Reply struct {
	Text  string
	Calls []Call
}

// Call is one tool call a scripted model makes.
type Call struct {
	Name string
	// Args is the call's input: a JSON object.
	Args json.RawMessage
	// Input, when set, makes the call one of a freeform tool (the
	// Responses API's custom tools, such as Codex's exec, whose input is
	// JavaScript): the text it is given instead of Args.
	Input string
}

// Request is what the server made of one request.
type Request struct {
	// Path is the request's URL path (the Gemini server records it; the
	// others serve one path each).
	Path   string
	Stream bool
	// Tools are the names of the tools offered.
	Tools []string
	// ToolResults are the tool results the request carries for the model's
	// last tool calls, in order.
	ToolResults []string
	// Body is the raw request body.
	Body []byte
}

// Server is a local vendor endpoint. Close it when done.
type Server struct {
	// URL is the server's root: give it to Anthropic's SDK as the base
	// URL, and URL+"/v1" to OpenAI's.
	URL string

	srv    *httptest.Server
	opt    Options
	vendor string

	mu       sync.Mutex
	requests []Request
	calls    int
}

// NewAnthropic starts a server for Anthropic's Messages API
// (POST /v1/messages).
func NewAnthropic(opt Options) *Server { return start("anthropic", opt) }

// NewOpenAI starts a server for OpenAI's Chat Completions API
// (POST /v1/chat/completions).
func NewOpenAI(opt Options) *Server { return start("openai", opt) }

// NewResponses starts a server for OpenAI's Responses API (POST
// /v1/responses), the wire format Codex speaks: give it URL+"/v1" as the
// base URL. Its model is opt.Script when set, else the run_code turn.
func NewResponses(opt Options) *Server { return start("responses", opt) }

// NewGemini starts a server for Google's Gemini API (POST
// /v1beta/models/{model}:generateContent and the rest): give its URL to
// the client as the base URL (GOOGLE_GEMINI_BASE_URL for Gemini CLI).
// Its model is opt.Script, which it requires.
func NewGemini(opt Options) *Server {
	if opt.Script == nil {
		panic("modelwire: NewGemini needs Options.Script")
	}
	return start("gemini", opt)
}

func start(vendor string, opt Options) *Server {
	if opt.Code == nil {
		opt.Code = func(string) string { return "print(6*7)" }
	}
	s := &Server{opt: opt, vendor: vendor}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests returns the requests served so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// soFar reads, from the last of n messages back, the person's message a
// request answers (the last user message with text and no tool results):
// its text parts, and how many tool results came after it. user says what
// message i holds, or ok false when it is not the user's.
func soFar(n int, user func(i int) (texts []string, results int, ok bool)) (asked []string, answered int) {
	for i := n - 1; i >= 0; i-- {
		texts, results, ok := user(i)
		if !ok {
			continue
		}
		answered += results
		if results == 0 && strings.Join(texts, "") != "" {
			return texts, answered
		}
	}
	return nil, answered
}

// reply is what the model decided: text, or one call of run_code.
type reply struct {
	text   string
	callID string
	args   string // JSON object
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	if _, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, 8<<20)); err != nil {
		s.refuse(w, http.StatusRequestEntityTooLarge, "request_too_large", "the request body is too large")
		return
	}
	switch s.vendor {
	case "anthropic":
		s.anthropic(w, r, body.Bytes())
	case "gemini":
		s.gemini(w, r, body.Bytes())
	case "responses":
		s.responses(w, r, body.Bytes())
	default:
		s.openai(w, r, body.Bytes())
	}
}

func (s *Server) record(req Request) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
}

func (s *Server) nextCallID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return fmt.Sprintf("%s%04d", prefix, s.calls)
}

// decide is the model: a person's message becomes a run_code call, a tool
// result becomes the answer.
func (s *Server) decide(lastUser string, results []string, resultErr bool, tools []string, prefix string) reply {
	if len(results) > 0 {
		verb := "printed"
		if resultErr {
			verb = "failed with"
		}
		return reply{text: fmt.Sprintf("%s %s: %s", ToolName, verb, strings.TrimSpace(strings.Join(results, "\n")))}
	}
	offered := false
	for _, t := range tools {
		offered = offered || t == ToolName
	}
	if !offered {
		return reply{text: "I would need a " + ToolName + " tool to compute that."}
	}
	args, _ := json.Marshal(map[string]string{"code": s.opt.Code(lastUser)})
	return reply{callID: s.nextCallID(prefix), args: string(args)}
}

func (s *Server) refuse(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var b []byte
	if s.vendor == "anthropic" {
		b, _ = json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	} else {
		b, _ = json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	}
	_, _ = w.Write(b)
}

// sse writes server-sent events, flushing after each one so the client
// reads them as they come.
type sse struct {
	w http.ResponseWriter
}

func newSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w: w}
}

func (e sse) send(name string, data any) {
	var b []byte
	if s, ok := data.(string); ok {
		b = []byte(s)
	} else {
		b, _ = json.Marshal(data)
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// halves cuts s in two, so streamed arguments arrive in pieces the client
// must put back together.
func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}

// words cuts text into word-sized deltas.
func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}
