package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go/ast"
	"go/parser"
	"go/token"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.yaml.in/yaml/v4"

	"github.com/agentry-dev/agentry/docs"
)

// The host's HTTP test suite checks every request it sends and every
// response it gets against docs/openapi.yaml: the fixtures put validating
// in front of the host's handler. A request the document allows must get
// a response it describes, for that operation and status; a request it
// does not allow (a test's bad input, a missing token) must be refused —
// never answered 2xx — with a response the operation describes, or, on a
// path or method the document does not have, with a 404 or 405 in the
// Error schema. So the document cannot drift from the handlers: a new
// endpoint, field or status fails the suite until the document has it.

// contract is the document, loaded and checked once, and a router over it.
type contractDoc struct {
	doc    *openapi3.T
	router routers.Router
	errSch *openapi3.Schema // components/schemas/Error
}

var loadContract = sync.OnceValues(func() (*contractDoc, error) {
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("loading docs/openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	doc.Servers = nil // match requests by path, whatever address the test server has
	r, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("routing docs/openapi.yaml: %w", err)
	}
	es := doc.Components.Schemas["Error"]
	if es == nil || es.Value == nil {
		return nil, errors.New("docs/openapi.yaml has no components/schemas/Error")
	}
	openapi3filter.RegisterBodyDecoder("text/event-stream", func(body io.Reader, _ http.Header, sch *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		return checkEventStream(doc, body, sch)
	})
	for _, ct := range []string{"text/html", "text/css", "text/javascript", "image/svg+xml", "image/png",
		"application/x-tar", "application/tar", "application/gzip", "application/x-gzip", "application/octet-stream"} {
		openapi3filter.RegisterBodyDecoder(ct, func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(body)
			return string(b), err
		})
	}
	return &contractDoc{doc: doc, router: r, errSch: es.Value}, nil
})

func contract(t testing.TB) *contractDoc {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bearerOnly is the document's security as a validator checks it: a
// bearer credential is presented (whether the host accepts it is the
// host's to say, with a 401).
func bearerOnly(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName != "bearer" {
		return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
	}
	scheme, tok, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// validating wraps the host's handler so that every exchange is checked
// against the document; a mismatch fails t.
func validating(t testing.TB, next http.Handler) http.Handler {
	c := contract(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			t.Errorf("openapi: reading the request body of %s %s: %v", r.Method, r.URL.Path, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		tw := &teeWriter{w: w, status: http.StatusOK}
		next.ServeHTTP(tw, r)
		tw.finish()
		if msg := c.check(r, body, tw); msg != "" {
			t.Errorf("openapi: %s %s answered %d: %s\nrequest body: %.300s\nresponse body: %.600s", r.Method, r.URL.RequestURI(), tw.status, msg, body, tw.body.Bytes())
		}
	})
}

// check returns what in the exchange the document does not allow ("" for
// nothing).
func (c *contractDoc) check(r *http.Request, reqBody []byte, tw *teeWriter) string {
	probe := r.Clone(context.Background())
	if probe.Method == http.MethodHead {
		probe.Method = http.MethodGet // HEAD is GET without a body
	}
	probe.Body = io.NopCloser(bytes.NewReader(reqBody))
	if len(reqBody) > 0 && probe.Header.Get("Content-Type") == "" {
		// The host reads a body sent without a type as JSON (the
		// document says so).
		probe.Header.Set("Content-Type", "application/json")
	}
	route, params, err := c.router.FindRoute(probe)
	if err != nil {
		// A path or method the document does not have: refused in JSON
		// (after the caller is proved: an unproved one learns nothing of
		// the API's shape, and a host shutting down refuses everything).
		switch tw.status {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnauthorized, http.StatusServiceUnavailable:
			return c.errorBody(tw)
		}
		return fmt.Sprintf("the document has no such operation (%v), yet the host answered it", err)
	}
	in := &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerOnly, MultiError: true}}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && tw.status < 400 {
		return fmt.Sprintf("the request is outside the document (%v), yet it was served", reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: tw.status, Header: tw.Header(),
		Body:    io.NopCloser(bytes.NewReader(tw.body.Bytes())),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: r.Method == http.MethodHead || tw.status == http.StatusNotModified}}
	if tw.status == http.StatusNoContent || tw.status == http.StatusNotModified {
		if tw.body.Len() > 0 {
			return "a body on a " + strconv.Itoa(tw.status)
		}
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return "the response is not what the document says: " + err.Error()
	}
	return ""
}

// errorBody checks an error answered outside any operation.
func (c *contractDoc) errorBody(tw *teeWriter) string {
	var v any
	if err := json.Unmarshal(tw.body.Bytes(), &v); err != nil {
		return "an error that is not JSON: " + err.Error()
	}
	if err := c.errSch.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return "an error outside the Error schema: " + err.Error()
	}
	return ""
}

// teeWriter passes a response on and keeps a copy. A plain response is
// held until the handler returns and the exchange is checked, so the
// client never sees an answer before its check is done (and a test cannot
// end before its failure is reported); an event stream goes out as it is
// written, and is checked when it ends.
type teeWriter struct {
	w       http.ResponseWriter
	status  int
	wrote   bool
	stream  bool
	body    bytes.Buffer
	flushed bool
}

func (tw *teeWriter) Header() http.Header { return tw.w.Header() }

func (tw *teeWriter) WriteHeader(status int) {
	if tw.wrote {
		return
	}
	tw.wrote, tw.status = true, status
	if ct := tw.w.Header().Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") {
		tw.stream = true
		tw.w.WriteHeader(status)
	}
}

func (tw *teeWriter) Write(b []byte) (int, error) {
	if !tw.wrote {
		tw.WriteHeader(http.StatusOK)
	}
	tw.body.Write(b)
	if tw.stream {
		return tw.w.Write(b)
	}
	return len(b), nil
}

func (tw *teeWriter) Flush() {
	if tw.stream {
		if f, ok := tw.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (tw *teeWriter) Unwrap() http.ResponseWriter { return tw.w }

// finish sends a held response.
func (tw *teeWriter) finish() {
	if tw.stream {
		return
	}
	if !tw.wrote {
		tw.status = http.StatusOK
	}
	tw.w.WriteHeader(tw.status)
	_, _ = tw.w.Write(tw.body.Bytes())
}

// checkEventStream reads an event stream and checks each event's data against
// the schema the document names for its event (the x-agentry-events of
// TurnStream or FeedStream); it returns the stream as a string, the type the
// document gives it.
func checkEventStream(doc *openapi3.T, body io.Reader, sch *openapi3.SchemaRef) (any, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	if sch == nil || sch.Value == nil {
		return nil, errors.New("an event stream with no schema")
	}
	names, _ := sch.Value.Extensions["x-agentry-events"].(map[string]any)
	if len(names) == 0 {
		return nil, errors.New("the stream's schema has no x-agentry-events")
	}
	var name, data string
	var last string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if name == "" && data == "" {
				continue
			}
			if err := checkEvent(doc, names, name, data); err != nil {
				return nil, err
			}
			last, name, data = name, "", ""
		case strings.HasPrefix(line, ":"): // a comment (keep-alive)
		case strings.HasPrefix(line, "id: "):
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		default:
			return nil, fmt.Errorf("a line that is not server-sent events: %.80q", line)
		}
	}
	if name != "" || data != "" {
		return nil, errors.New("the stream ends inside an event")
	}
	// A turn's stream ends with its result; the feed has no last event.
	if _, ends := names["result"]; ends && last != "result" && len(raw) > 0 && !bytes.Contains(raw, []byte("event: result\n")) {
		return nil, fmt.Errorf("the stream does not end with its result (last event %q)", last)
	}
	return string(raw), nil
}

func checkEvent(doc *openapi3.T, names map[string]any, name, data string) error {
	ref, _ := names[name].(string)
	if ref == "" && strings.HasPrefix(name, "agentry.") {
		ref, _ = names["agentry.*"].(string)
	}
	if ref == "" {
		return fmt.Errorf("event %q is not in the document's x-agentry-events", name)
	}
	sr := doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
	if sr == nil || sr.Value == nil {
		return fmt.Errorf("x-agentry-events names %s, which the document does not have", ref)
	}
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		return fmt.Errorf("event %q: data is not JSON: %v", name, err)
	}
	if err := sr.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("event %q: data outside %s: %v", name, ref, err)
	}
	return nil
}

// The document is a valid OpenAPI 3.1 document, and every operation says
// how it fails.
func TestOpenAPIDocumentValidates(t *testing.T) {
	c := contract(t)
	if !c.doc.IsOpenAPI31OrLater() {
		t.Fatalf("docs/openapi.yaml says openapi %q, want 3.1", c.doc.OpenAPI)
	}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId (the generated client names its method after it)", method, path)
			}
			if op.Responses.Len() == 0 {
				t.Errorf("%s %s has no responses", method, path)
			}
		}
	}
}

// The error codes the document lists are exactly the host's Code
// constants (host/errors.go).
func TestOpenAPIErrorCodes(t *testing.T) {
	c := contract(t)
	var listed []string
	for _, v := range c.doc.Components.Schemas["ErrorCode"].Value.Enum {
		listed = append(listed, v.(string))
	}
	codes := hostCodes(t)
	slices.Sort(listed)
	slices.Sort(codes)
	if !slices.Equal(listed, codes) {
		t.Fatalf("ErrorCode in docs/openapi.yaml:\n%v\nthe host's codes:\n%v", listed, codes)
	}
}

// The host serves the document as JSON at /v1/openapi.json, without a
// token: the same document as docs/openapi.yaml on disk.
func TestOpenAPIServed(t *testing.T) {
	f := newFixture(t, config{})
	r := f.do("GET", "/v1/openapi.json", "", nil)
	want(t, r, 200, "")
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	served, err := openapi3.NewLoader().LoadFromData(r.body)
	if err != nil {
		t.Fatalf("the served document does not load: %v", err)
	}
	file, err := openapi3.NewLoader().LoadFromFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(served)
	b, _ := json.Marshal(file)
	if !bytes.Equal(a, b) {
		t.Fatalf("the served document differs from docs/openapi.yaml")
	}
	// Value for value, not only as kin-openapi reads them.
	raw, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML, fromJSON any
	if err := yamlUnmarshal(raw, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r.body, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(fromYAML), fromJSON) {
		t.Fatal("the served JSON is not docs/openapi.yaml value for value")
	}
}

// normalize makes a decoded YAML value comparable with decoded JSON:
// numbers as float64.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normalize(e)
		}
	case int:
		return float64(t)
	case uint64:
		return float64(t)
	case int64:
		return float64(t)
	}
	return v
}

// The validator catches what it is for: a response outside the document,
// a status it does not list, a success for a request it does not allow,
// and an answer on a path it does not have.
func TestOpenAPIValidatorCatchesDrift(t *testing.T) {
	c := contract(t)
	tok := "Bearer agt_x"
	cases := []struct {
		name    string
		method  string
		path    string
		auth    string
		body    string
		status  int
		ctype   string
		respond string
		ok      bool
	}{
		{"a documented answer", "GET", "/v1/me", tok, "", 200, "application/json", `{"tenant":"acme","principal":"alice"}`, true},
		{"a field the document lacks", "GET", "/v1/me", tok, "", 200, "application/json", `{"tenant":"acme","principal":"alice","email":"a@x"}`, false},
		{"a required field missing", "GET", "/v1/me", tok, "", 200, "application/json", `{"tenant":"acme"}`, false},
		{"a status the document lacks", "GET", "/v1/me", tok, "", 418, "application/json", `{"error":{"code":"internal","message":"m"}}`, false},
		{"an error code the document lacks", "GET", "/v1/me", tok, "", 401, "application/json", `{"error":{"code":"nope","message":"m"}}`, false},
		{"a success without a token", "GET", "/v1/me", "", "", 200, "application/json", `{"tenant":"acme","principal":"alice"}`, false},
		{"a refusal without a token", "GET", "/v1/me", "", "", 401, "application/json", `{"error":{"code":"unauthenticated","message":"m"}}`, true},
		{"a bad body served", "POST", "/v1/sessions/ses_00000000000000000000000000000000/turns", tok, `{"message":5}`, 200, "application/json", `{"runId":"r","output":"o"}`, false},
		{"a bad body refused", "POST", "/v1/sessions/ses_00000000000000000000000000000000/turns", tok, `{"message":5}`, 400, "application/json", `{"error":{"code":"invalid_json","message":"m","field":"message"}}`, true},
		{"an undocumented path answered", "GET", "/v1/nothing", tok, "", 200, "application/json", `{}`, false},
		{"an undocumented path refused", "GET", "/v1/nothing", tok, "", 404, "application/json", `{"error":{"code":"not_found","message":"m"}}`, true},
		{"a stream event outside its schema", "POST", "/v1/sessions/ses_00000000000000000000000000000000/turns", tok, `{"message":"hi"}`, 200, "text/event-stream",
			"event: output\ndata: {\"kind\":\"bogus\"}\n\nevent: result\ndata: {\"runId\":\"r\",\"output\":\"o\"}\n\n", false},
		{"a stream as documented", "POST", "/v1/sessions/ses_00000000000000000000000000000000/turns", tok, `{"message":"hi"}`, 200, "text/event-stream",
			": keep-alive\n\nevent: output\ndata: {\"kind\":\"text\",\"text\":\"o\"}\n\nevent: result\ndata: {\"runId\":\"r\",\"output\":\"o\"}\n\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			tw := &teeWriter{w: rec, status: http.StatusOK}
			tw.Header().Set("Content-Type", tc.ctype)
			tw.WriteHeader(tc.status)
			_, _ = tw.Write([]byte(tc.respond))
			tw.finish()
			msg := c.check(req, []byte(tc.body), tw)
			if (msg == "") != tc.ok {
				t.Fatalf("check said %q; want ok=%v", msg, tc.ok)
			}
		})
	}
}

func yamlUnmarshal(b []byte, v any) error { return yaml.Unmarshal(b, v) }

// hostCodes reads the host's error codes from host/errors.go: every
// constant of type Code.
func hostCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("a Code constant that is not a string literal: %v", v)
				}
				c, _ := strconv.Unquote(lit.Value)
				codes = append(codes, c)
			}
		}
	}
	if len(codes) < 30 {
		t.Fatalf("found only %d codes in errors.go", len(codes))
	}
	return codes
}

// Every operation the document describes is one the host serves: asked
// of a host (with a conversation of the caller's, and as an admin of its
// tenant for the admin paths), none is answered as an unknown path or
// method. With the validating fixture, each answer is also checked
// against the operation. The closes go last.
func TestOpenAPIEveryOperationIsServed(t *testing.T) {
	c := contract(t)
	f := newFixture(t, config{})
	id := f.open("root")
	type op struct{ method, path string }
	var ops []op
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, op{method, path})
		}
	}
	slices.SortFunc(ops, func(a, b op) int {
		if (a.method == "DELETE") != (b.method == "DELETE") {
			if a.method == "DELETE" {
				return 1
			}
			return -1
		}
		return strings.Compare(a.method+a.path, b.method+b.path)
	})
	bodies := map[string]string{
		"/v1/sessions":               `{}`,
		"/v1/sessions/{id}/turns":    `{"message":"hello"}`,
		"/v1/sessions/{id}/decision": `{"approve":true}`,
	}
	for _, o := range ops {
		path := strings.NewReplacer("{id}", id, "{tenant}", "acme", "{name}", "app.js").Replace(o.path)
		var body any
		if b, ok := bodies[o.path]; ok && o.method == "POST" {
			body = b
		}
		var hdr []string
		if o.path == "/v1/events" {
			// The feed streams until the client goes: asked with an id
			// it never sent, it answers at once (400), and that it
			// answers at all shows it is served.
			hdr = []string{"Last-Event-ID", "not-an-id"}
		}
		r := f.do(o.method, path, "root", body, hdr...)
		if r.status == http.StatusMethodNotAllowed || (r.status == http.StatusNotFound && bytes.Contains(r.body, []byte("no such path"))) {
			t.Errorf("%s %s (documented as %s) is not served: %d %s", o.method, path, o.path, r.status, r.body)
		}
	}
	if len(ops) < 20 {
		t.Fatalf("only %d operations in the document", len(ops))
	}
}

// What checking one exchange costs the suite: a turn's request and its
// JSON answer.
//
//	go test -run '^$' -bench OpenAPICheck -benchtime 2000x ./host
func BenchmarkOpenAPICheck(b *testing.B) {
	c := contract(b)
	body := []byte(`{"message":"hello"}`)
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/sessions/ses_00000000000000000000000000000000/turns", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer agt_x")
		req.Header.Set("Content-Type", "application/json")
		tw := &teeWriter{w: httptest.NewRecorder(), status: http.StatusOK}
		tw.Header().Set("Content-Type", "application/json")
		_, _ = tw.Write([]byte(`{"runId":"run-1","output":"you said: hello"}`))
		if msg := c.check(req, body, tw); msg != "" {
			b.Fatal(msg)
		}
	}
}
