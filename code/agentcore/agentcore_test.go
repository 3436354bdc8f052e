package agentcore_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"
	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/agentcore"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig points the real SDK at a local server with static test
// credentials.
func testConfig(endpoint string, client aws.HTTPClient) *aws.Config {
	return &aws.Config{
		Region:       "us-west-2",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   client,
	}
}

// setup starts the fake on a local HTTP server and a runner on the real
// SDK client aimed at it.
func setup(t *testing.T, opt agentcore.Options) (*fakeAgentCore, *agentcore.Runner) {
	t.Helper()
	fake := newFake(t)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	opt.Config = testConfig(srv.URL, srv.Client())
	if opt.Ledger == "" {
		opt.Ledger = t.TempDir()
	}
	r, err := agentcore.New(context.Background(), opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return fake, r
}

func start(t *testing.T, r *agentcore.Runner, key string) *agentcore.Session {
	t.Helper()
	s, err := r.Start(context.Background(), code.StartRequest{Key: key, Language: "python"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s.(*agentcore.Session)
}

const testKey = "t=acme-corp/p=alice@example.com/r=run-7f3a"

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{SessionTimeout: 15 * time.Minute})
	ctx := context.Background()
	if r.ID() != "agentcore" || r.Identifier() != "aws.codeinterpreter.v1" {
		t.Fatalf("defaults: id %q identifier %q", r.ID(), r.Identifier())
	}

	sess, err := r.Start(ctx, code.StartRequest{Key: testKey, Language: "python"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if sess.ID() != "01JFAKESESSION000001" {
		t.Fatalf("session id %q, want the service's", sess.ID())
	}

	for i, src := range []string{"x = 6 * 7", "print(x)"} {
		res, err := sess.Execute(ctx, code.ExecRequest{Code: src})
		if err != nil {
			t.Fatalf("Execute %d: %v", i, err)
		}
		if !res.OK || res.Stdout != "ran: "+src+"\n" || res.Stderr != "" || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Fatalf("Execute %d: %+v", i, res)
		}
		if res.Artifacts != nil || res.Truncated != nil {
			t.Fatalf("Execute %d: artifacts %v truncated %v, want nil and nil", i, res.Artifacts, res.Truncated)
		}
	}
	if err := sess.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	reqs := fake.seen()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want start, 2 invokes, stop:\n%v", len(reqs), reqs)
	}
	// Start: PUT with the identifier in the path, the hashed name and the
	// timeout in the JSON body.
	var startBody struct {
		Name                  string `json:"name"`
		SessionTimeoutSeconds int    `json:"sessionTimeoutSeconds"`
	}
	if err := json.Unmarshal(reqs[0].Body, &startBody); err != nil {
		t.Fatal(err)
	}
	if reqs[0].Method != "PUT" || reqs[0].Path != "/code-interpreters/aws.codeinterpreter.v1/sessions/start" {
		t.Fatalf("start request %s %s", reqs[0].Method, reqs[0].Path)
	}
	if startBody.SessionTimeoutSeconds != 900 {
		t.Fatalf("sessionTimeoutSeconds %d, want 900", startBody.SessionTimeoutSeconds)
	}
	// Invokes: the session id travels in its header; the tool is
	// executeCode with the code and the mapped language.
	for _, q := range reqs[1:3] {
		if got := q.Header.Get("X-Amzn-Code-Interpreter-Session-Id"); got != sess.ID() {
			t.Fatalf("invoke session header %q", got)
		}
		var body struct {
			Name      string
			Arguments map[string]any
		}
		if err := json.Unmarshal(q.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Name != "executeCode" || body.Arguments["language"] != "python" {
			t.Fatalf("invoke body %s", q.Body)
		}
	}
	// Stop: PUT with the session id as a query parameter.
	if reqs[3].Method != "PUT" || reqs[3].Path != "/code-interpreters/aws.codeinterpreter.v1/sessions/stop" || !strings.Contains(reqs[3].RawQuery, "sessionId="+sess.ID()) {
		t.Fatalf("stop request %s %s?%s", reqs[3].Method, reqs[3].Path, reqs[3].RawQuery)
	}
}

// The remote name is "agentry-" and the first 12 hex characters of the
// key's SHA-256, and nothing that could give the key back is ever sent.
func TestKeyNeverLeavesTheProcess(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	ctx := context.Background()
	sess := start(t, r, testKey)
	if _, err := sess.Execute(ctx, code.ExecRequest{Code: "print(1)"}); err != nil {
		t.Fatal(err)
	}
	fake.set(func(f *fakeAgentCore) { f.invokeFail = &wireError{429, "ThrottlingException", "slow down"} })
	_, _ = sess.Execute(ctx, code.ExecRequest{Code: "print(2)"})
	if err := sess.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	sum := sha256.Sum256([]byte(testKey))
	want := "agentry-" + hex.EncodeToString(sum[:])[:12]
	if sess.Name() != want || agentcore.SessionName(testKey) != want || want != "agentry-"+toolsession.HashKey(testKey) {
		t.Fatalf("session name %q, want %q", sess.Name(), want)
	}
	var startBody struct{ Name string }
	if err := json.Unmarshal(fake.seen()[0].Body, &startBody); err != nil || startBody.Name != want {
		t.Fatalf("name sent %q (%v), want %q", startBody.Name, err, want)
	}

	secrets := []string{testKey, "acme-corp", "alice@example.com", "alice", "run-7f3a"}
	var forms []string
	for _, s := range secrets {
		forms = append(forms, s, url.QueryEscape(s), url.PathEscape(s),
			base64.StdEncoding.EncodeToString([]byte(s)), base64.URLEncoding.EncodeToString([]byte(s)))
	}
	reqs := fake.seen()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	for _, q := range reqs {
		dump := strings.ToLower(q.String())
		for _, f := range forms {
			if strings.Contains(dump, strings.ToLower(f)) {
				t.Errorf("request %s %s carries %q from the isolation key:\n%s", q.Method, q.Path, f, dump)
			}
		}
	}
}

func TestSessionIsNotAStager(t *testing.T) {
	t.Parallel()
	_, r := setup(t, agentcore.Options{})
	var s code.Session = start(t, r, testKey)
	if _, ok := s.(code.Stager); ok {
		t.Fatal("an agentcore session implements code.Stager; it has no staging and must not claim it")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestServiceExceptionsAreNamed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		arrange    func(f *fakeAgentCore)
		onStart    bool
		code       string
		sdkErr     any // the SDK's exception type the error also unwraps to
		broken     bool
		mentions   string
		wantInvoke int // invoke requests made (no retries of an execute)
	}{
		{
			name:     "access denied on start",
			arrange:  func(f *fakeAgentCore) { f.startFail = &wireError{403, "AccessDeniedException", "not authorized"} },
			onStart:  true,
			code:     "AccessDeniedException",
			sdkErr:   new(*types.AccessDeniedException),
			mentions: "bedrock-agentcore:StartCodeInterpreterSession",
		},
		{
			name: "quota on start",
			arrange: func(f *fakeAgentCore) {
				f.startFail = &wireError{402, "ServiceQuotaExceededException", "too many sessions"}
			},
			onStart:  true,
			code:     "ServiceQuotaExceededException",
			sdkErr:   new(*types.ServiceQuotaExceededException),
			mentions: "stop idle ones",
		},
		{
			name:       "throttling on invoke is not retried",
			arrange:    func(f *fakeAgentCore) { f.invokeFail = &wireError{429, "ThrottlingException", "rate exceeded"} },
			code:       "ThrottlingException",
			sdkErr:     new(*types.ThrottlingException),
			mentions:   "retry later",
			wantInvoke: 1,
		},
		{
			name:       "access denied on invoke",
			arrange:    func(f *fakeAgentCore) { f.invokeFail = &wireError{403, "AccessDeniedException", "no"} },
			code:       "AccessDeniedException",
			sdkErr:     new(*types.AccessDeniedException),
			mentions:   "bedrock-agentcore:InvokeCodeInterpreter",
			wantInvoke: 1,
		},
		{
			name:       "resource not found on invoke breaks the session",
			arrange:    func(f *fakeAgentCore) { f.invokeFail = &wireError{404, "ResourceNotFoundException", "session expired"} },
			code:       "ResourceNotFoundException",
			sdkErr:     new(*types.ResourceNotFoundException),
			broken:     true,
			mentions:   "start a new one",
			wantInvoke: 1,
		},
		{
			name: "throttling exception event in the stream",
			arrange: func(f *fakeAgentCore) {
				f.script = func(string, string) []frame { return []frame{exceptionFrame("throttlingException", "slow down")} }
			},
			code:       "ThrottlingException",
			sdkErr:     new(*types.ThrottlingException),
			mentions:   "slow down",
			wantInvoke: 1,
		},
		{
			name: "validation exception event after a result",
			arrange: func(f *fakeAgentCore) {
				f.script = func(string, string) []frame {
					return []frame{structured("partial\n", "", 0), exceptionFrame("validationException", "code too long")}
				}
			},
			code:       "ValidationException",
			sdkErr:     new(*types.ValidationException),
			mentions:   "code too long",
			wantInvoke: 1,
		},
		{
			name: "resource not found event breaks the session",
			arrange: func(f *fakeAgentCore) {
				f.script = func(string, string) []frame { return []frame{exceptionFrame("resourceNotFoundException", "gone")} }
			},
			code:       "ResourceNotFoundException",
			sdkErr:     new(*types.ResourceNotFoundException),
			broken:     true,
			wantInvoke: 1,
		},
		{
			name: "error message in the stream",
			arrange: func(f *fakeAgentCore) {
				f.script = func(string, string) []frame {
					return []frame{{messageType: eventstreamapi.ErrorMessageType, name: "InternalFailure", payload: []byte("sandbox crashed")}}
				}
			},
			code:       "InternalFailure",
			mentions:   "sandbox crashed",
			wantInvoke: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, r := setup(t, agentcore.Options{})
			fake.set(tc.arrange)
			ctx := context.Background()
			var err error
			var sess code.Session
			if tc.onStart {
				sess, err = r.Start(ctx, code.StartRequest{Key: testKey})
				if sess != nil {
					t.Fatal("a failed start returned a session")
				}
			} else {
				sess = start(t, r, testKey)
				var res code.Result
				res, err = sess.Execute(ctx, code.ExecRequest{Code: "print(1)"})
				if err != nil && (res.Stdout != "" || res.OK) {
					t.Fatalf("an error came with a result: %+v", res)
				}
			}
			var ae *agentcore.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v (%T) is not an *agentcore.APIError", err, err)
			}
			if ae.Code != tc.code || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("error %q: code %q, want %q", err, ae.Code, tc.code)
			}
			if tc.sdkErr != nil && !errors.As(err, tc.sdkErr) {
				t.Fatalf("error %v does not unwrap to %T", err, tc.sdkErr)
			}
			if tc.mentions != "" && !strings.Contains(err.Error(), tc.mentions) {
				t.Fatalf("error %q does not mention %q", err, tc.mentions)
			}
			if got := errors.Is(err, agentcore.ErrBroken); got != tc.broken || errors.Is(err, code.ErrBroken) != tc.broken {
				t.Fatalf("errors.Is(ErrBroken) = %v, want %v (%v)", got, tc.broken, err)
			}
			if got := fake.count("POST", "/tools/invoke"); got != tc.wantInvoke {
				t.Fatalf("%d invoke requests, want %d", got, tc.wantInvoke)
			}
			if sess == nil {
				return
			}
			// A broken session says so without calling the service; a
			// healthy one runs the next execute.
			fake.set(func(f *fakeAgentCore) { f.invokeFail, f.script = nil, newFake(t).script })
			_, err = sess.Execute(ctx, code.ExecRequest{Code: "print(2)"})
			if tc.broken {
				if !errors.Is(err, agentcore.ErrBroken) || fake.count("POST", "/tools/invoke") != tc.wantInvoke {
					t.Fatalf("execute on a broken session: %v", err)
				}
			} else if err != nil {
				t.Fatalf("execute after a named exception: %v", err)
			}
			if err := sess.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
		})
	}
}

func TestStopTreatsAlreadyGoneAsSuccess(t *testing.T) {
	t.Parallel()
	for _, gone := range []*wireError{
		{404, "ResourceNotFoundException", "no such session"},
		{400, "ValidationException", "session is terminated"},
	} {
		t.Run(gone.code, func(t *testing.T) {
			t.Parallel()
			fake, r := setup(t, agentcore.Options{})
			sess := start(t, r, testKey)
			fake.set(func(f *fakeAgentCore) { f.stopFail = []*wireError{gone} })
			if err := sess.Stop(context.Background()); err != nil {
				t.Fatalf("Stop on a reaped session: %v", err)
			}
			if err := sess.Stop(context.Background()); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
			if n := fake.count("PUT", "/sessions/stop"); n != 1 {
				t.Fatalf("%d stop requests, want 1", n)
			}
		})
	}
}

func TestStopFailureIsNamedAndRetryable(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	fake.set(func(f *fakeAgentCore) { f.stopFail = []*wireError{{403, "AccessDeniedException", "denied"}} })
	err := sess.Stop(context.Background())
	var ae *agentcore.APIError
	if !errors.As(err, &ae) || ae.Code != "AccessDeniedException" || ae.Op != "stop" || !strings.Contains(err.Error(), "bedrock-agentcore:StopCodeInterpreterSession") {
		t.Fatalf("failed stop: %v", err)
	}
	// Even a failed Stop ends the session for this process.
	if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "1"}); !errors.Is(err, agentcore.ErrStopped) {
		t.Fatalf("execute after a failed stop: %v", err)
	}
	if err := sess.Stop(context.Background()); err != nil {
		t.Fatalf("retried Stop: %v", err)
	}
	if n := fake.count("PUT", "/sessions/stop"); n != 2 {
		t.Fatalf("%d stop requests, want 2", n)
	}
}

func TestDoubleAndConcurrentStop(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- sess.Stop(context.Background()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if err := sess.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after Stop: %v", err)
	}
	if n := fake.count("PUT", "/sessions/stop"); n != 1 {
		t.Fatalf("%d stop requests, want 1", n)
	}
}

func TestExecuteAfterStopNamesTheSession(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	if err := sess.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := sess.Execute(context.Background(), code.ExecRequest{Code: "print(1)"})
	if !errors.Is(err, agentcore.ErrStopped) || !strings.Contains(err.Error(), sess.ID()) || !strings.Contains(err.Error(), sess.Name()) {
		t.Fatalf("execute after stop: %v", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("error leaks the key: %v", err)
	}
	if n := fake.count("POST", "/tools/invoke"); n != 0 {
		t.Fatalf("execute after stop reached the service (%d invokes)", n)
	}
	if n := fake.count("PUT", "/sessions/start"); n != 1 {
		t.Fatalf("execute after stop started a session (%d starts)", n)
	}
}

func TestSessionTimeoutValidation(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{time.Second, 59 * time.Second, 28801 * time.Second, 90*time.Second + 500*time.Millisecond, -time.Minute} {
		_, err := agentcore.New(context.Background(), agentcore.Options{SessionTimeout: d, Config: testConfig("http://127.0.0.1:1", nil)})
		if !errors.Is(err, agentcore.ErrSessionTimeout) || !strings.Contains(err.Error(), d.String()) {
			t.Errorf("timeout %v: %v", d, err)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{60 * time.Second, `"sessionTimeoutSeconds":60`}, {8 * time.Hour, `"sessionTimeoutSeconds":28800`}, {0, ""}} {
		fake, r := setup(t, agentcore.Options{SessionTimeout: tc.d})
		sess := start(t, r, testKey)
		body := string(fake.seen()[0].Body)
		if tc.want != "" && !strings.Contains(body, tc.want) || tc.want == "" && strings.Contains(body, "sessionTimeoutSeconds") {
			t.Errorf("timeout %v sent %s", tc.d, body)
		}
		if err := sess.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNonZeroExitIsAResultNotAnError(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	fake.set(func(f *fakeAgentCore) {
		f.script = func(string, string) []frame {
			return []frame{structured("", "Traceback (most recent call last):\nZeroDivisionError: division by zero\n", 1)}
		}
	})
	res, err := sess.Execute(context.Background(), code.ExecRequest{Code: "1/0"})
	if err != nil {
		t.Fatalf("non-zero exit returned an error: %v", err)
	}
	if res.OK || res.ExitCode == nil || *res.ExitCode != 1 || !strings.Contains(res.Stderr, "ZeroDivisionError") || res.Stdout != "" {
		t.Fatalf("result %+v", res)
	}
	// The session stays usable.
	fake.set(func(f *fakeAgentCore) { f.script = newFake(t).script })
	if res, err := sess.Execute(context.Background(), code.ExecRequest{Code: "print(1)"}); err != nil || !res.OK {
		t.Fatalf("execute after a failing one: %+v %v", res, err)
	}
	_ = sess.Stop(context.Background())
}

func TestOutputDecoding(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		frames []frame
		limit  int
		check  func(t *testing.T, res code.Result)
	}{
		{
			name: "structured content wins over text blocks",
			frames: []frame{resultFrame(wireResult{
				Content:           []wireBlock{{Type: "text", Text: ptr("TEXT BLOCK")}},
				StructuredContent: &wireStructured{Stdout: ptr("structured out\n"), Stderr: ptr("warn\n"), ExitCode: ptr(int32(0))},
			})},
			check: func(t *testing.T, res code.Result) {
				if res.Stdout != "structured out\n" || res.Stderr != "warn\n" || !res.OK || *res.ExitCode != 0 {
					t.Fatalf("%+v", res)
				}
			},
		},
		{
			name: "text blocks without structured content",
			frames: []frame{resultFrame(wireResult{
				Content: []wireBlock{{Type: "text", Text: ptr("first")}, {Type: "text", Text: ptr("second\n")}},
			})},
			check: func(t *testing.T, res code.Result) {
				if res.Stdout != "first\nsecond\n" || !res.OK || res.ExitCode != nil {
					t.Fatalf("%+v", res)
				}
			},
		},
		{
			name: "an isError text result is stderr and not OK",
			frames: []frame{resultFrame(wireResult{
				Content: []wireBlock{{Type: "text", Text: ptr("NameError: name 'y' is not defined")}},
				IsError: ptr(true),
			})},
			check: func(t *testing.T, res code.Result) {
				if res.OK || res.Stdout != "" || !strings.HasPrefix(res.Stderr, "NameError") || res.ExitCode != nil {
					t.Fatalf("%+v", res)
				}
			},
		},
		{
			name:   "several result events accumulate",
			frames: []frame{structured("a\n", "", 0), structured("b\n", "", 0)},
			check: func(t *testing.T, res code.Result) {
				if res.Stdout != "a\nb\n" || !res.OK {
					t.Fatalf("%+v", res)
				}
			},
		},
		{
			name: "an unknown event is read past",
			frames: []frame{
				{messageType: eventstreamapi.EventMessageType, name: "progress", payload: []byte(`{"percent":50}`)},
				structured("done\n", "", 0),
			},
			check: func(t *testing.T, res code.Result) {
				if res.Stdout != "done\n" || !res.OK {
					t.Fatalf("%+v", res)
				}
			},
		},
		{
			name: "images and links are artifacts",
			frames: []frame{resultFrame(wireResult{
				Content: []wireBlock{
					{Type: "text", Text: ptr("plotted\n")},
					{Type: "image", Data: []byte("\x89PNG fake bytes"), MimeType: ptr("image/png")},
					{Type: "resource_link", Name: ptr("out.csv"), URI: ptr("file:///opt/amazon/genesis1p-tools/var/out.csv"), Size: ptr(int64(2048))},
					{Type: "resource", Resource: &wireResource{Type: "text", URI: ptr("file:///tmp/notes.txt"), Text: ptr("hello")}},
				},
			})},
			check: func(t *testing.T, res code.Result) {
				want := []code.Artifact{
					{Name: "image-1", Bytes: 15},
					{Name: "out.csv", Bytes: 2048, URI: "file:///opt/amazon/genesis1p-tools/var/out.csv"},
					{Name: "resource-3", Bytes: 5, URI: "file:///tmp/notes.txt"},
				}
				if res.Stdout != "plotted\n" || len(res.Artifacts) != len(want) {
					t.Fatalf("%+v", res)
				}
				for i := range want {
					if res.Artifacts[i] != want[i] {
						t.Fatalf("artifact %d: %+v, want %+v", i, res.Artifacts[i], want[i])
					}
				}
			},
		},
		{
			name:   "cuts are stated, per stream, in characters",
			limit:  10,
			frames: []frame{structured("ééééééééééééééééééééé\n", "short", 0)},
			check: func(t *testing.T, res code.Result) {
				if res.Stdout != "éééééééééé" || res.Stderr != "short" {
					t.Fatalf("%+v", res)
				}
				if tr := res.Truncated; tr == nil || !tr.Stdout || tr.Stderr || tr.OfChars != 22 {
					t.Fatalf("truncated %+v", res.Truncated)
				}
			},
		},
		{
			name:   "both streams cut: OfChars is the longer",
			limit:  3,
			frames: []frame{structured("12345", "1234567", 2)},
			check: func(t *testing.T, res code.Result) {
				if tr := res.Truncated; tr == nil || !tr.Stdout || !tr.Stderr || tr.OfChars != 7 || res.OK {
					t.Fatalf("%+v %+v", res, res.Truncated)
				}
			},
		},
		{
			name:   "output exactly at the limit is not cut",
			limit:  5,
			frames: []frame{structured("12345", "", 0)},
			check: func(t *testing.T, res code.Result) {
				if res.Truncated != nil || res.Stdout != "12345" {
					t.Fatalf("%+v", res)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, r := setup(t, agentcore.Options{MaxOutputChars: tc.limit})
			sess := start(t, r, testKey)
			fake.set(func(f *fakeAgentCore) { f.script = func(string, string) []frame { return tc.frames } })
			res, err := sess.Execute(context.Background(), code.ExecRequest{Code: "x"})
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			tc.check(t, res)
			_ = sess.Stop(context.Background())
		})
	}
}

func TestStreamWithoutResultIsAnError(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	fake.set(func(f *fakeAgentCore) { f.script = func(string, string) []frame { return nil } })
	if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "x"}); err == nil || !strings.Contains(err.Error(), "without a result") {
		t.Fatalf("empty stream: %v", err)
	}
	_ = sess.Stop(context.Background())
}

func TestGarbledStreamBreaksTheSession(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	fake.set(func(f *fakeAgentCore) {
		f.raw = func(w io.Writer) {
			// A frame prelude that promises more bytes than ever arrive,
			// then a frame with a bad CRC.
			_, _ = w.Write([]byte{0, 0, 0, 64, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6})
		}
	})
	_, err := sess.Execute(context.Background(), code.ExecRequest{Code: "x"})
	if !errors.Is(err, agentcore.ErrBroken) {
		t.Fatalf("garbled stream: %v", err)
	}
	if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "x"}); !errors.Is(err, agentcore.ErrBroken) {
		t.Fatalf("execute after a garbled stream: %v", err)
	}
	if err := sess.Stop(context.Background()); err != nil {
		t.Fatalf("stopping a broken session: %v", err)
	}
}

func TestCancelStopsAHungInvoke(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	fake.set(func(f *fakeAgentCore) { f.hang = true })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sess.Execute(ctx, code.ExecRequest{Code: "while True: pass", Timeout: time.Hour})
		done <- err
	}()
	<-fake.invoking // the service has the request and is "running" it
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled execute: %v", err)
	}
	// The code may still be running remotely: the session says so.
	fake.set(func(f *fakeAgentCore) { f.hang = false })
	if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "print(1)"}); !errors.Is(err, agentcore.ErrBroken) {
		t.Fatalf("execute after a cancelled one: %v", err)
	}
	if err := sess.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledBeforeSendingLeavesTheSessionUsable(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	sess := start(t, r, testKey)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sess.Execute(ctx, code.ExecRequest{Code: "print(1)"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("execute with a dead context: %v", err)
	}
	if n := fake.count("POST", "/tools/invoke"); n != 0 {
		t.Fatalf("%d invokes sent on a dead context", n)
	}
	if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "print(1)"}); err != nil {
		t.Fatalf("session unusable after a call that never left: %v", err)
	}
	_ = sess.Stop(context.Background())
}

func TestLanguages(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	if _, err := r.Start(context.Background(), code.StartRequest{Key: testKey, Language: "ruby"}); !errors.Is(err, agentcore.ErrUnsupportedLanguage) || !strings.Contains(err.Error(), "python, javascript or typescript") {
		t.Fatalf("start with ruby: %v", err)
	}
	if n := len(fake.seen()); n != 0 {
		t.Fatalf("an unsupported language reached the service (%d requests)", n)
	}
	sess, err := r.Start(context.Background(), code.StartRequest{Key: testKey, Language: "JS"})
	if err != nil {
		t.Fatal(err)
	}
	var langs []string
	fake.set(func(f *fakeAgentCore) {
		f.script = func(_ string, lang string) []frame {
			langs = append(langs, lang)
			return []frame{structured("", "", 0)}
		}
	})
	for _, l := range []string{"", "ts", "python3"} {
		if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "1", Language: l}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sess.Execute(context.Background(), code.ExecRequest{Code: "1", Language: "cobol"}); !errors.Is(err, agentcore.ErrUnsupportedLanguage) {
		t.Fatalf("execute in cobol: %v", err)
	}
	fake.mu.Lock()
	got := strings.Join(langs, ",")
	fake.mu.Unlock()
	if got != "javascript,typescript,python" {
		t.Fatalf("languages sent: %s", got)
	}
	_ = sess.Stop(context.Background())
}

func TestStartNeedsAKey(t *testing.T) {
	t.Parallel()
	fake, r := setup(t, agentcore.Options{})
	if _, err := r.Start(context.Background(), code.StartRequest{}); err == nil || !strings.Contains(err.Error(), "isolation key") {
		t.Fatalf("start without a key: %v", err)
	}
	if len(fake.seen()) != 0 {
		t.Fatal("a keyless start reached the service")
	}
}

func TestOptionsAreChecked(t *testing.T) {
	t.Parallel()
	cfg := testConfig("http://127.0.0.1:1", nil)
	client := bedrockagentcore.NewFromConfig(*cfg)
	for name, opt := range map[string]agentcore.Options{
		"client and config": {Client: client, Config: cfg},
		"negative exec":     {Config: cfg, ExecTimeout: -time.Second},
		"negative chars":    {Config: cfg, MaxOutputChars: -1},
	} {
		if _, err := agentcore.New(context.Background(), opt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r, err := agentcore.New(context.Background(), agentcore.Options{Client: client, ID: "agentcore-eu", Identifier: "mine-0123456789"})
	if err != nil || r.ID() != "agentcore-eu" || r.Identifier() != "mine-0123456789" {
		t.Fatalf("runner from a client: %v", err)
	}
	noRegion := bedrockagentcore.New(bedrockagentcore.Options{Credentials: cfg.Credentials})
	if _, err := agentcore.New(context.Background(), agentcore.Options{Client: noRegion}); !errors.Is(err, agentcore.ErrNoRegion) {
		t.Fatalf("client without a region: %v", err)
	}
}

// isolateAWSEnv points the default AWS chain at nothing.
func isolateAWSEnv(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":                        dir + "/config",
		"AWS_SHARED_CREDENTIALS_FILE":            dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED":              "true",
		"AWS_REGION":                             "",
		"AWS_DEFAULT_REGION":                     "",
		"AWS_PROFILE":                            "",
		"AWS_ACCESS_KEY_ID":                      "",
		"AWS_SECRET_ACCESS_KEY":                  "",
		"AWS_SESSION_TOKEN":                      "",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "",
		"AWS_ROLE_ARN":                           "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "",
	} {
		t.Setenv(k, v)
	}
}

func TestMissingRegionSaysWhatToSet(t *testing.T) {
	isolateAWSEnv(t)
	_, err := agentcore.New(context.Background(), agentcore.Options{})
	if !errors.Is(err, agentcore.ErrNoRegion) || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("no region: %v", err)
	}
}

func TestMissingCredentialsSayWhatToSet(t *testing.T) {
	isolateAWSEnv(t)
	fake := newFake(t)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", srv.URL)
	r, err := agentcore.New(context.Background(), agentcore.Options{Region: "us-west-2"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	_, err = r.Start(context.Background(), code.StartRequest{Key: testKey})
	if !errors.Is(err, agentcore.ErrNoCredentials) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") || !strings.Contains(err.Error(), "AWS_PROFILE") {
		t.Fatalf("no credentials: %v", err)
	}
	if n := len(fake.seen()); n != 0 {
		t.Fatalf("%d requests sent without credentials", n)
	}

	// With credentials in the environment the same runner setup works
	// against the endpoint named by AWS_ENDPOINT_URL_BEDROCK_AGENTCORE.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	r, err = agentcore.New(context.Background(), agentcore.Options{Region: "us-west-2"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := r.Start(context.Background(), code.StartRequest{Key: testKey})
	if err != nil {
		t.Fatalf("Start with env credentials: %v", err)
	}
	if err := sess.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
