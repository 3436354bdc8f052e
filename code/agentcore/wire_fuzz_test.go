package agentcore_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/agentcore"
)

// FuzzWireResult feeds arbitrary frames through the real SDK's decoder
// and the runner: an event or an exception with any type name and any
// payload. Whatever arrives, Execute returns either a named error or a
// result within the output limit whose cut is stated, and never panics.
func FuzzWireResult(f *testing.F) {
	const limit = 64
	fake := newFake(f)
	srv := httptest.NewServer(fake)
	f.Cleanup(srv.Close)
	r, err := agentcore.New(context.Background(), agentcore.Options{MaxOutputChars: limit, Config: testConfig(srv.URL, srv.Client()), Ledger: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(false, "result", []byte(`{"content":[{"type":"text","text":"42\n"}],"structuredContent":{"stdout":"42\n","stderr":"","exitCode":0},"isError":false}`))
	f.Add(false, "result", []byte(`{"content":[{"type":"text","text":"boom"}],"isError":true}`))
	f.Add(false, "result", []byte(`{"content":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"resource_link","uri":"s3://b/k","size":12}]}`))
	f.Add(false, "result", []byte(`{"structuredContent":{"exitCode":99999999999}}`))
	f.Add(false, "result", []byte(`{"content":"not a list"}`))
	f.Add(false, "result", []byte(`{`))
	f.Add(false, "somethingNew", []byte(`{"x":1}`))
	f.Add(true, "throttlingException", []byte(`{"message":"slow"}`))
	f.Add(true, "notAModeledException", []byte(`{"__type":"Weird","message":"odd"}`))
	f.Add(true, "accessDeniedException", []byte(`not json`))
	f.Fuzz(func(t *testing.T, exception bool, name string, payload []byte) {
		fr := frame{messageType: eventstreamapi.EventMessageType, name: name, payload: payload}
		if exception {
			fr.messageType = eventstreamapi.ExceptionMessageType
		}
		if len(name) == 0 || len(name) > 255 || !utf8.ValidString(name) {
			t.Skip("the event-stream format limits header values")
		}
		fake.set(func(f *fakeAgentCore) { f.script = func(string, string) []frame { return []frame{fr} } })
		ctx := context.Background()
		s, err := r.Start(ctx, code.StartRequest{Key: "c=call-1"})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}()
		res, err := s.Execute(ctx, code.ExecRequest{Code: "x"})
		if err != nil {
			var ae *agentcore.APIError
			if exception && !errors.As(err, &ae) && !errors.Is(err, agentcore.ErrBroken) {
				t.Fatalf("exception frame gave an unnamed error: %v", err)
			}
			return
		}
		if exception {
			t.Fatalf("an exception frame gave a result: %+v", res)
		}
		for _, out := range []string{res.Stdout, res.Stderr} {
			if utf8.RuneCountInString(out) > limit || !utf8.ValidString(out) {
				t.Fatalf("output over the limit or not UTF-8: %q", out)
			}
		}
		if tr := res.Truncated; tr != nil && (!tr.Stdout && !tr.Stderr || tr.OfChars <= limit) {
			t.Fatalf("bad truncation %+v", tr)
		}
		if res.Artifacts != nil && len(res.Artifacts) == 0 {
			t.Fatal("an empty, non-nil artifact list: this runner never claims that")
		}
	})
}
