package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/llm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "sk-secret-key-0123456789"

var target = Target{Provider: "openai", Model: "m", BaseURL: "http://user:pw@localhost:8000/v1?token=x", Key: key,
	AuthFix: "auth fix", ModelsFix: "models fix", StartFix: "start fix"}

func TestBackoffIsBoundedAndGrows(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 40; n++ {
		full := min(baseDelay<<min(n-1, 5), capDelay)
		for range 50 {
			d := Backoff(n)
			if d > full || d < full-full/4 {
				t.Fatalf("Backoff(%d) = %s, want in [%s, %s]", n, d, full-full/4, full)
			}
		}
	}
}

func TestRetryDecides(t *testing.T) {
	t.Parallel()
	var waits []time.Duration
	p := Policy{MaxRetries: 2, MaxWait: 10 * time.Second, Sleep: func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}}
	ctx := context.Background()
	limited := func(after time.Duration) error {
		e := target.FromHTTP(429, nil, nil, time.Now())
		e.RetryAfter = after
		return e
	}
	if err := p.Retry(ctx, 1, limited(3*time.Second)); err != nil || waits[0] != 3*time.Second {
		t.Fatalf("first retry: %v %v", err, waits)
	}
	if err := p.Retry(ctx, 2, limited(0)); err != nil || len(waits) != 2 {
		t.Fatalf("second retry: %v", err)
	}
	err := p.Retry(ctx, 3, limited(0))
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Attempts != 3 || len(waits) != 2 {
		t.Fatalf("third: %v", err)
	}
	if err := p.Retry(ctx, 1, limited(11*time.Second)); !errors.Is(err, llm.ErrRateLimited) || !strings.Contains(err.Error(), "longer than this client waits") {
		t.Fatalf("long wait: %v", err)
	}
	for _, e := range []error{
		target.FromHTTP(400, nil, nil, time.Now()),
		target.FromHTTP(401, nil, nil, time.Now()),
		target.FromHTTP(404, nil, nil, time.Now()),
		target.FromTransport(syscall.ECONNREFUSED),
		errors.New("not an API error"),
	} {
		if err := p.Retry(ctx, 1, e); err != e {
			t.Errorf("%v was retried", e)
		}
	}
	if len(waits) != 2 {
		t.Fatalf("waits %v", waits)
	}
	if (Policy{MaxRetries: -1}).Retry(ctx, 1, limited(0)) == nil {
		t.Fatal("negative MaxRetries retried")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Retry(cctx, 1, limited(0)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	cctx, cancel2 := context.WithCancelCause(ctx)
	cancel2(errors.New("shutting down"))
	if err := p.Retry(cctx, 1, limited(0)); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("cause: %v", err)
	}
}

func TestDefaultSleepStopsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := Sleep(context.Background(), time.Nanosecond); err != nil {
		t.Fatal(err)
	}
}

func TestRetryAfterForms(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    map[string]string
		want time.Duration
	}{
		{nil, 0},
		{map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After": "-3"}, 0},
		{map[string]string{"Retry-After": "NaN"}, 0},
		{map[string]string{"Retry-After": "1e300"}, maxRetryAfter},
		{map[string]string{"Retry-After": "Sat, 01 Mar 2025 12:00:30 GMT"}, 30 * time.Second},
		{map[string]string{"Retry-After": "Sat, 01 Mar 2025 11:00:00 GMT"}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{map[string]string{"Retry-After-Ms": "x", "Retry-After": "9"}, 9 * time.Second},
	} {
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		if got := RetryAfter(h, now); got != c.want {
			t.Errorf("%v: got %s want %s", c.h, got, c.want)
		}
	}
}

func TestMessageShapes(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"type":"error","error":{"type":"not_found_error","message":"model: x"}}`: "model: x",
		`{"error":"model 'x' not found"}`:                                          "model 'x' not found",
		`{"object":"error","message":"The model x does not exist.","code":404}`:    "The model x does not exist.",
		`{"detail":"Not Found"}`:                                                   "Not Found",
		`"just a string"`:                                                          "just a string",
		`{"error":{"code":500}}`:                                                   "",
		`[1,2]`:                                                                    "",
		`404 page not found`:                                                       "404 page not found",
		``:                                                                         "",
	} {
		if got := Message([]byte(body)); got != want {
			t.Errorf("%s: got %q want %q", body, got, want)
		}
	}
}

func TestFromHTTP(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for status, kind := range map[int]error{
		401: llm.ErrAuth, 403: llm.ErrAuth, 404: llm.ErrModelNotFound, 429: llm.ErrRateLimited,
		408: llm.ErrServer, 500: llm.ErrServer, 529: llm.ErrServer, 400: llm.ErrBadRequest, 422: llm.ErrBadRequest,
	} {
		e := target.FromHTTP(status, http.Header{"Retry-After": {"2"}}, []byte(`{"error":{"message":"model says `+key+`"}}`), now)
		if !errors.Is(e, kind) || e.Status != status || e.RetryAfter != 2*time.Second {
			t.Errorf("%d: %v", status, e)
		}
		if strings.Contains(e.Error(), key) || strings.Contains(e.Error(), "pw@") || strings.Contains(e.Error(), "token=") {
			t.Errorf("%d leaks: %v", status, e)
		}
	}
	e := target.FromHTTP(404, nil, []byte("404 page not found"), now)
	if !strings.Contains(e.Error(), "check the base URL http://localhost:8000/v1") {
		t.Errorf("wrong-path 404: %v", e)
	}
}

func TestFromTransport(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Err: syscall.ECONNREFUSED}}
	if e := target.FromTransport(refused); !errors.Is(e, llm.ErrUnreachable) || !strings.Contains(e.Error(), "start fix") {
		t.Errorf("refused: %v", e)
	}
	if e := target.FromTransport(&net.DNSError{Name: "nohost.invalid", Err: "no such host"}); !errors.Is(e, llm.ErrUnreachable) || !strings.Contains(e.Error(), "nohost.invalid") {
		t.Errorf("dns: %v", e)
	}
	if e := target.FromTransport(fmt.Errorf("read: %w", syscall.ECONNRESET)); !errors.Is(e, llm.ErrServer) || !errors.Is(e, syscall.ECONNRESET) {
		t.Errorf("reset: %v", e)
	}
	if e := target.FromTransport(errors.New("json: cannot unmarshal")); e != nil {
		t.Errorf("not transport: %v", e)
	}
	if e := target.Protocol(errors.New("invalid character '<'")); !errors.Is(e, llm.ErrProtocol) {
		t.Errorf("protocol: %v", e)
	}
}

func TestCallsAssembly(t *testing.T) {
	t.Parallel()
	var c Calls
	steps := []struct {
		index          int64
		id, name, args string
	}{
		{0, "a", "run_code", `{"co`},
		{1, "b", "clock", ``},
		{0, "", "", `de": 1}`},
		{0, "c", "run_code", `{}`}, // a new id at a used index is a new call
		{2, "", "", `{"x":2}`},     // no id: one is made up
	}
	for _, s := range steps {
		if err := c.Delta(s.index, s.id, s.name, s.args); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Rest(); err == nil || !errors.Is(err, llm.ErrBadToolCall) {
		t.Fatalf("a call without a name: %v", err)
	}

	var d Calls
	_ = d.Delta(0, "a", "run_code", `{"co`)
	_ = d.Delta(1, "b", "clock", ``)
	_ = d.Delta(0, "", "", `de": 1}`)
	_ = d.Delta(0, "c", "run_code", `{}`)
	_ = d.Delta(2, "", "t", ` {"x" : 2} `)
	first, ok, err := d.Finish(1)
	if err != nil || !ok || first.ID != "b" || string(first.Args) != "{}" {
		t.Fatalf("finish: %v %v %+v", ok, err, first)
	}
	if _, ok, _ := d.Finish(1); ok {
		t.Fatal("finished twice")
	}
	rest, err := d.Rest()
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rest)
	want := fmt.Sprint([]llm.ToolCall{
		{ID: "a", Name: "run_code", Args: json.RawMessage(`{"code":1}`)},
		{ID: "c", Name: "run_code", Args: json.RawMessage(`{}`)},
		{ID: "call_4", Name: "t", Args: json.RawMessage(`{"x":2}`)},
	})
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func TestCallsBounds(t *testing.T) {
	t.Parallel()
	var c Calls
	for i := range MaxCalls {
		if err := c.Delta(int64(i), "", "t", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delta(MaxCalls, "", "t", ""); !errors.Is(err, llm.ErrBadToolCall) {
		t.Fatalf("too many calls: %v", err)
	}
	var d Calls
	big := strings.Repeat("x", MaxArgsBytes/2+1)
	if err := d.Delta(0, "a", "t", big); err != nil {
		t.Fatal(err)
	}
	if err := d.Delta(0, "", "", big); !errors.Is(err, llm.ErrBadToolCall) {
		t.Fatalf("too long: %v", err)
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		``: true, `null`: true, `{}`: true, `{"type":"object","properties":{"a":{"type":"integer","minimum":1e400}}}`: true,
		`{"properties":{"a":{"type":"number","minimum":0.1}}}`: true, `{"type":"array"}`: false, `{"type":["object"]}`: false,
		`[]`: false, `"x"`: false, `{`: false,
	} {
		m, err := Schema(json.RawMessage(raw))
		if (err == nil) != ok {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if ok && string(m["type"]) != `"object"` {
			t.Errorf("%s: type %s", raw, m["type"])
		}
	}
	m, _ := Schema(json.RawMessage(`{"properties":{"a":{"type":"number","minimum":0.10000000000000000001}}}`))
	if !bytes.Contains(m["properties"], []byte("0.10000000000000000001")) {
		t.Errorf("numbers must be kept byte for byte: %s", m["properties"])
	}
}

func TestCleanAndRedact(t *testing.T) {
	t.Parallel()
	got := target.Clean("line one\n\tline\x00two " + key + " " + strings.Repeat("é", 400))
	if strings.Contains(got, key) || strings.ContainsAny(got, "\n\t\x00") || !strings.HasPrefix(got, "line one line two [redacted] ") {
		t.Fatalf("got %q", got)
	}
	if n := utf8.RuneCountInString(got); n != maxMessage+1 {
		t.Fatalf("%d runes", n)
	}
	if got := RedactURL("https://u:p@h.example/v1?key=1#f"); got != "https://h.example/v1" {
		t.Fatalf("got %q", got)
	}
	if got := RedactURL("http://[::1"); got != "the configured base URL" {
		t.Fatalf("got %q", got)
	}
}

func TestCaptureKeepsTheBodyForTheSDK(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", maxErrorBody+10)
	var c Capture
	res, err := c.Middleware(&http.Request{}, func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"1"}},
			Body: readCloser{strings.NewReader(long), nopCloser{}}}, nil
	})
	if err != nil || c.Status != 503 || len(c.Body) != maxErrorBody {
		t.Fatalf("%v %d %d", err, c.Status, len(c.Body))
	}
	var rest bytes.Buffer
	_, _ = rest.ReadFrom(res.Body)
	if rest.String() != long {
		t.Fatal("the SDK would not see the whole body")
	}
	var none Capture
	if _, err := none.Middleware(&http.Request{}, func(*http.Request) (*http.Response, error) { return nil, errors.New("dial") }); err == nil || none.Status != 0 {
		t.Fatal("no response")
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// Streamed arguments cut anywhere come out as the compacted original, or
// as a malformed-call error; never anything else.
func FuzzCallsAssembly(f *testing.F) {
	f.Add(`{"code": "print(\"hi\")"}`, []byte{3, 9, 1})
	f.Add(``, []byte{})
	f.Add(`{"a":[1,2,{"b":null}]}`, []byte{1, 1, 1, 1})
	f.Add(`{"unterminated`, []byte{4})
	f.Add(`  null `, []byte{2})
	f.Add(`{"é":"\u00e9"}`, []byte{2, 2})
	f.Fuzz(func(t *testing.T, doc string, cuts []byte) {
		var c Calls
		rest := doc
		for _, n := range cuts {
			if rest == "" {
				break
			}
			k := int(n) % (len(rest) + 1)
			if err := c.Delta(0, "", "", rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := c.Delta(0, "id", "tool", rest); err != nil {
			if len(doc) > MaxArgsBytes {
				return
			}
			t.Fatal(err)
		}
		call, ok, err := c.Finish(0)
		trimmed := strings.Trim(doc, " \t\r\n")
		switch {
		case trimmed == "" || trimmed == "null":
			if err != nil || string(call.Args) != "{}" {
				t.Fatalf("%q: %s %v", doc, call.Args, err)
			}
		case json.Valid([]byte(doc)):
			var want bytes.Buffer
			_ = json.Compact(&want, []byte(doc))
			if err != nil || !ok || string(call.Args) != want.String() || call.ID != "id" || call.Name != "tool" {
				t.Fatalf("%q: got %s %v", doc, call.Args, err)
			}
		default:
			if !errors.Is(err, llm.ErrBadToolCall) || ok {
				t.Fatalf("%q accepted: %s", doc, call.Args)
			}
		}
	})
}

// Whatever a server sends, the message shown is short, printable and free
// of the key.
func FuzzErrorBody(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"bad key sk-secret-key-0123456789"}}`))
	f.Add([]byte(`{"error":"x\n\ny"}`))
	f.Add([]byte("<html>\x00\x01</html>"))
	f.Add([]byte(`{"message":"` + strings.Repeat("ab", 300) + `"}`))
	f.Add([]byte{0xff, 0xfe, 's', 'k'})
	f.Fuzz(func(t *testing.T, body []byte) {
		e := target.FromHTTP(400, nil, body, time.Now())
		msg := e.Message
		if strings.Contains(msg, key) || strings.Contains(e.Error(), key) {
			t.Fatalf("key in %q", msg)
		}
		if utf8.RuneCountInString(msg) > maxMessage+1 || !utf8.ValidString(msg) {
			t.Fatalf("message %q", msg)
		}
		for _, r := range msg {
			if unicode.IsControl(r) {
				t.Fatalf("control character in %q", msg)
			}
		}
	})
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "0.25", "-1", "1e308", "Inf", "Sat, 01 Mar 2025 12:00:30 GMT", "", "NaN"} {
		f.Add(s, "")
	}
	f.Add("", "1500")
	f.Fuzz(func(t *testing.T, after, afterMs string) {
		h := http.Header{}
		h.Set("Retry-After", after)
		h.Set("Retry-After-Ms", afterMs)
		d := RetryAfter(h, time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("%q/%q: %s", after, afterMs, d)
		}
	})
}

// A schema comes back as an object whose type is "object", with every
// other member unchanged, or is refused.
func FuzzSchema(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		`{"type":"array"}`, `[]`, `{"$defs":{"x":{}},"properties":{}}`, `{"type":"object","type":"array"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Schema(raw)
		if err != nil {
			return
		}
		if string(m["type"]) != `"object"` && !bytes.Equal(bytes.TrimSpace(m["type"]), []byte(`"object"`)) {
			var s string
			if json.Unmarshal(m["type"], &s) != nil || s != "object" {
				t.Fatalf("type %s", m["type"])
			}
		}
		out, err := json.Marshal(m)
		if err != nil || !json.Valid(out) {
			t.Fatalf("cannot send %s: %v", raw, err)
		}
	})
}

// llm.APIError is tested here rather than in package llm, whose tests
// belong to the port's owner.
func TestAPIErrorText(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	e := &llm.APIError{Provider: "ollama", Model: "llama3.2", Kind: llm.ErrUnreachable, Attempts: 2,
		Fix: "start it with `ollama serve`", Cause: cause}
	want := "ollama: model server unreachable (model \"llama3.2\"): dial: connection refused (after 2 attempts); start it with `ollama serve`"
	if e.Error() != want {
		t.Fatalf("got  %s\nwant %s", e, want)
	}
	if !errors.Is(e, llm.ErrUnreachable) || !errors.Is(e, syscall.ECONNREFUSED) || errors.Is(e, llm.ErrAuth) {
		t.Fatal("errors.Is")
	}
	e = &llm.APIError{Provider: "anthropic", Kind: llm.ErrRateLimited, Status: 429, Message: "slow down"}
	if got := e.Error(); got != "anthropic: rate limited: HTTP 429: slow down" {
		t.Fatalf("got %s", got)
	}
}

// The assembly cost of a 4 KiB program streamed in 16-byte pieces, the
// shape of a run_code call; the baseline is compacting it in one piece.
func BenchmarkCallsAssembly(b *testing.B) {
	args, _ := json.Marshal(map[string]string{"code": strings.Repeat("print('x')\n", 372)})
	b.Run("streamed", func(b *testing.B) {
		b.SetBytes(int64(len(args)))
		for b.Loop() {
			var c Calls
			for i := 0; i < len(args); i += 16 {
				_ = c.Delta(0, "id", "run_code", string(args[i:min(i+16, len(args))]))
			}
			if _, _, err := c.Finish(0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-whole", func(b *testing.B) {
		b.SetBytes(int64(len(args)))
		for b.Loop() {
			if _, err := Args(args); err != nil {
				b.Fatal(err)
			}
		}
	})
}
