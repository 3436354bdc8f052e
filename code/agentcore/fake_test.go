package agentcore_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
)

// fakeAgentCore is a local stand-in for the AgentCore data plane that
// speaks its wire format: the REST-JSON routes, headers and bodies of
// StartCodeInterpreterSession, InvokeCodeInterpreter and
// StopCodeInterpreterSession, exceptions as X-Amzn-ErrorType plus a JSON
// body, and the InvokeCodeInterpreter response as an
// application/vnd.amazon.eventstream body of binary frames. It runs no
// code: each test scripts the frames an execute answers with.
type fakeAgentCore struct {
	t      testing.TB
	region string

	mu       sync.Mutex
	requests []seenRequest
	sessions map[string]*fakeSession
	seq      int

	// Knobs; set them before the runner calls.
	startFail  *wireError
	invokeFail *wireError
	stopFail   []*wireError // consumed one per stop call, in order
	script     func(code, language string) []frame
	raw        func(w io.Writer) // writes the invoke body itself
	hang       bool              // invoke sends its headers, then waits for the client to go
	invoking   chan struct{}     // signalled when a hanging invoke has sent its headers
}

type fakeSession struct {
	identifier, name string
	timeout          *int
	stopped          bool
}

// seenRequest is everything the client sent, kept for the leak checks.
type seenRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

func (r seenRequest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s?%s\n", r.Method, r.Path, r.RawQuery)
	for k, vs := range r.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	b.Write(r.Body)
	return b.String()
}

type wireError struct {
	status  int
	code    string
	message string
}

// frame is one event-stream message: an event, an exception or an error.
type frame struct {
	messageType string // eventstreamapi.EventMessageType, ExceptionMessageType or ErrorMessageType
	name        string // the event type, exception type or error code
	payload     []byte
}

// Wire shapes of CodeInterpreterResult, as the service writes them.
type wireResult struct {
	Content           []wireBlock     `json:"content"`
	StructuredContent *wireStructured `json:"structuredContent,omitempty"`
	IsError           *bool           `json:"isError,omitempty"`
}

type wireBlock struct {
	Type     string        `json:"type"`
	Text     *string       `json:"text,omitempty"`
	Data     []byte        `json:"data,omitempty"` // base64 on the wire, as smithy blobs are
	MimeType *string       `json:"mimeType,omitempty"`
	URI      *string       `json:"uri,omitempty"`
	Name     *string       `json:"name,omitempty"`
	Size     *int64        `json:"size,omitempty"`
	Resource *wireResource `json:"resource,omitempty"`
}

type wireResource struct {
	Type     string  `json:"type"`
	URI      *string `json:"uri,omitempty"`
	MimeType *string `json:"mimeType,omitempty"`
	Text     *string `json:"text,omitempty"`
}

type wireStructured struct {
	Stdout        *string  `json:"stdout,omitempty"`
	Stderr        *string  `json:"stderr,omitempty"`
	ExitCode      *int32   `json:"exitCode,omitempty"`
	ExecutionTime *float64 `json:"executionTime,omitempty"`
	TaskStatus    string   `json:"taskStatus,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func resultFrame(r wireResult) frame {
	p, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return frame{messageType: eventstreamapi.EventMessageType, name: "result", payload: p}
}

// structured is the usual answer: structured content plus the text block
// the service repeats it in.
func structured(stdout, stderr string, exit int32) frame {
	text := stdout
	if stderr != "" {
		text += stderr
	}
	return resultFrame(wireResult{
		Content:           []wireBlock{{Type: "text", Text: ptr(text)}},
		StructuredContent: &wireStructured{Stdout: ptr(stdout), Stderr: ptr(stderr), ExitCode: ptr(exit), ExecutionTime: ptr(12.5), TaskStatus: "completed"},
		IsError:           ptr(exit != 0),
	})
}

// exceptionFrame is a modeled exception inside the stream; member is the
// union member name ("throttlingException").
func exceptionFrame(member, message string) frame {
	p, _ := json.Marshal(map[string]string{"message": message})
	return frame{messageType: eventstreamapi.ExceptionMessageType, name: member, payload: p}
}

func newFake(t testing.TB) *fakeAgentCore {
	return &fakeAgentCore{
		t:        t,
		region:   "us-west-2",
		sessions: map[string]*fakeSession{},
		invoking: make(chan struct{}, 16),
		script: func(code, _ string) []frame {
			return []frame{structured("ran: "+code+"\n", "", 0)}
		},
	}
}

func (f *fakeAgentCore) set(fn func(f *fakeAgentCore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeAgentCore) seen() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.requests...)
}

func (f *fakeAgentCore) count(method, suffix string) int {
	n := 0
	for _, r := range f.seen() {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

var (
	startPath  = regexp.MustCompile(`^/code-interpreters/([^/]+)/sessions/start$`)
	stopPath   = regexp.MustCompile(`^/code-interpreters/([^/]+)/sessions/stop$`)
	invokePath = regexp.MustCompile(`^/code-interpreters/([^/]+)/tools/invoke$`)
	authHeader = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKIDTEST/\d{8}/([a-z0-9-]+)/bedrock-agentcore/aws4_request, SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}$`)
)

func (f *fakeAgentCore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, seenRequest{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	f.mu.Unlock()

	// Every call is SigV4-signed for the bedrock-agentcore signing name.
	m := authHeader.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || m[1] != f.region || r.Header.Get("X-Amz-Date") == "" {
		f.t.Errorf("fake agentcore: unsigned or mis-signed request: %q", r.Header.Get("Authorization"))
		writeError(w, &wireError{403, "UnrecognizedClientException", "the request was not signed"})
		return
	}

	switch {
	case r.Method == http.MethodPut && startPath.MatchString(r.URL.Path):
		f.start(w, r, startPath.FindStringSubmatch(r.URL.Path)[1], body)
	case r.Method == http.MethodPost && invokePath.MatchString(r.URL.Path):
		f.invoke(w, r, invokePath.FindStringSubmatch(r.URL.Path)[1], body)
	case r.Method == http.MethodPut && stopPath.MatchString(r.URL.Path):
		f.stop(w, r, stopPath.FindStringSubmatch(r.URL.Path)[1])
	default:
		f.t.Errorf("fake agentcore: no such operation: %s %s", r.Method, r.URL.Path)
		writeError(w, &wireError{404, "UnknownOperationException", "no such operation"})
	}
}

// decodeStrict decodes a JSON body, refusing members the operation does
// not have, as the service's validation does.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (f *fakeAgentCore) start(w http.ResponseWriter, r *http.Request, identifier string, body []byte) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeError(w, &wireError{400, "ValidationException", "content type must be application/json, got " + ct})
		return
	}
	var in struct {
		Name                  *string         `json:"name"`
		SessionTimeoutSeconds *int            `json:"sessionTimeoutSeconds"`
		ClientToken           *string         `json:"clientToken"`
		Certificates          json.RawMessage `json:"certificates"`
		FilesystemConfigs     json.RawMessage `json:"filesystemConfigurations"`
	}
	if err := decodeStrict(body, &in); err != nil {
		writeError(w, &wireError{400, "ValidationException", "malformed body: " + err.Error()})
		return
	}
	if in.ClientToken == nil || len(*in.ClientToken) < 33 {
		writeError(w, &wireError{400, "ValidationException", "clientToken must be at least 33 characters"})
		return
	}
	if t := in.SessionTimeoutSeconds; t != nil && (*t < 1 || *t > 28800) {
		writeError(w, &wireError{400, "ValidationException", "sessionTimeoutSeconds out of range"})
		return
	}
	f.mu.Lock()
	fail := f.startFail
	f.seq++
	id := fmt.Sprintf("01JFAKESESSION%06d", f.seq)
	if fail == nil {
		f.sessions[id] = &fakeSession{identifier: identifier, name: deref(in.Name), timeout: in.SessionTimeoutSeconds}
	}
	f.mu.Unlock()
	if fail != nil {
		writeError(w, fail)
		return
	}
	writeJSON(w, map[string]any{
		"codeInterpreterIdentifier": identifier,
		"sessionId":                 id,
		"createdAt":                 "2026-01-02T03:04:05.123Z",
	})
}

func (f *fakeAgentCore) invoke(w http.ResponseWriter, r *http.Request, identifier string, body []byte) {
	var in struct {
		Name      string `json:"name"`
		Arguments struct {
			Code     *string `json:"code"`
			Language string  `json:"language"`
		} `json:"arguments"`
	}
	if err := decodeStrict(body, &in); err != nil || in.Name != "executeCode" || in.Arguments.Code == nil {
		writeError(w, &wireError{400, "ValidationException", fmt.Sprintf("malformed executeCode call (%v)", err)})
		return
	}
	sid := r.Header.Get("X-Amzn-Code-Interpreter-Session-Id")
	f.mu.Lock()
	s := f.sessions[sid]
	fail, script, raw, hang := f.invokeFail, f.script, f.raw, f.hang
	f.mu.Unlock()
	if s == nil || s.stopped || s.identifier != identifier {
		writeError(w, &wireError{404, "ResourceNotFoundException", "session " + sid + " not found"})
		return
	}
	if fail != nil {
		writeError(w, fail)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.Header().Set("X-Amzn-Code-Interpreter-Session-Id", sid)
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	switch {
	case hang:
		f.invoking <- struct{}{}
		<-r.Context().Done()
	case raw != nil:
		raw(w)
	default:
		writeFrames(f.t, w, script(*in.Arguments.Code, in.Arguments.Language))
	}
}

func (f *fakeAgentCore) stop(w http.ResponseWriter, r *http.Request, identifier string) {
	sid := r.URL.Query().Get("sessionId")
	f.mu.Lock()
	var fail *wireError
	if len(f.stopFail) > 0 {
		fail, f.stopFail = f.stopFail[0], f.stopFail[1:]
	}
	s := f.sessions[sid]
	known := s != nil && !s.stopped && s.identifier == identifier
	if known && fail == nil {
		s.stopped = true
	}
	f.mu.Unlock()
	switch {
	case fail != nil:
		writeError(w, fail)
	case !known:
		writeError(w, &wireError{404, "ResourceNotFoundException", "session " + sid + " not found"})
	default:
		writeJSON(w, map[string]any{
			"codeInterpreterIdentifier": identifier,
			"sessionId":                 sid,
			"lastUpdatedAt":             time.Date(2026, 1, 2, 3, 9, 5, 0, time.UTC).Format(time.RFC3339),
		})
	}
}

// writeFrames encodes frames with the SDK's event-stream encoder (prelude,
// headers, payload, CRCs) and flushes each, as a streaming service does.
func writeFrames(t testing.TB, w io.Writer, frames []frame) {
	enc := eventstream.NewEncoder()
	for _, fr := range frames {
		var msg eventstream.Message
		msg.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(fr.messageType))
		switch fr.messageType {
		case eventstreamapi.EventMessageType:
			msg.Headers.Set(eventstreamapi.EventTypeHeader, eventstream.StringValue(fr.name))
			msg.Headers.Set(eventstreamapi.ContentTypeHeader, eventstream.StringValue("application/json"))
			msg.Payload = fr.payload
		case eventstreamapi.ExceptionMessageType:
			msg.Headers.Set(eventstreamapi.ExceptionTypeHeader, eventstream.StringValue(fr.name))
			msg.Headers.Set(eventstreamapi.ContentTypeHeader, eventstream.StringValue("application/json"))
			msg.Payload = fr.payload
		case eventstreamapi.ErrorMessageType:
			msg.Headers.Set(eventstreamapi.ErrorCodeHeader, eventstream.StringValue(fr.name))
			msg.Headers.Set(eventstreamapi.ErrorMessageHeader, eventstream.StringValue(string(fr.payload)))
		}
		if err := enc.Encode(w, msg); err != nil {
			t.Errorf("fake agentcore: encode frame: %v", err)
			return
		}
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
}

func writeError(w http.ResponseWriter, e *wireError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", e.code+":http://internal.amazon.com/coral/com.amazonaws.bedrockagentcore/")
	w.WriteHeader(e.status)
	body := map[string]any{"message": e.message}
	if e.code == "ValidationException" {
		body["reason"] = "FieldValidationFailed"
		body["fieldList"] = []map[string]string{{"name": "request", "message": e.message}}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
