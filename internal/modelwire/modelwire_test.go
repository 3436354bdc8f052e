package modelwire_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func post(t *testing.T, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The servers refuse what the vendors refuse, so a client that sends a
// malformed conversation fails here as it would against the real API.
func TestVendorRules(t *testing.T) {
	a := modelwire.NewAnthropic(modelwire.Options{APIKey: "k"})
	defer a.Close()
	o := modelwire.NewOpenAI(modelwire.Options{APIKey: "k"})
	defer o.Close()
	g := modelwire.NewGemini(modelwire.Options{APIKey: "k", Script: func(tr modelwire.Turn) modelwire.Reply {
		return modelwire.Reply{Text: "asked " + tr.Asked}
	}})
	defer g.Close()
	gen := g.URL + "/v1beta/models/m:generateContent"
	gkey := []string{"X-Goog-Api-Key", "k"}
	tools := `"tools":[{"name":"run_code","input_schema":{"type":"object"}}]`
	for _, c := range []struct {
		name, url, body string
		hdr             []string
		status          int
		want            string
	}{
		{"anthropic wrong key", a.URL + "/v1/messages", `{}`, []string{"X-Api-Key", "nope", "Anthropic-Version", "2023-06-01"}, 401, "authentication_error"},
		{"anthropic no version", a.URL + "/v1/messages", `{}`, []string{"X-Api-Key", "k"}, 400, "anthropic-version"},
		{"anthropic no max_tokens", a.URL + "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			[]string{"X-Api-Key", "k", "Anthropic-Version", "2023-06-01"}, 400, "max_tokens"},
		{"anthropic unanswered tool_use", a.URL + "/v1/messages",
			`{"model":"m","max_tokens":10,` + tools + `,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"run_code","input":{}}]},{"role":"user","content":"go on"}]}`,
			[]string{"X-Api-Key", "k", "Anthropic-Version", "2023-06-01"}, 400, "without tool_result"},
		{"anthropic asks for run_code", a.URL + "/v1/messages", `{"model":"m","max_tokens":10,` + tools + `,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"X-Api-Key", "k", "Anthropic-Version", "2023-06-01"}, 200, `"name":"run_code"`},
		{"openai wrong key", o.URL + "/v1/chat/completions", `{}`, []string{"Authorization", "Bearer nope"}, 401, "Incorrect API key"},
		{"openai orphan tool message", o.URL + "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c","content":"42"}]}`,
			[]string{"Authorization", "Bearer k"}, 400, "must be a response"},
		{"openai wrong path", o.URL + "/v1/completions", `{}`, []string{"Authorization", "Bearer k"}, 404, "not found"},
		{"openai without the tool", o.URL + "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer k"}, 200, "would need a run_code tool"},
		{"gemini wrong key", gen, `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, []string{"X-Goog-Api-Key", "nope"}, 400, "API key not valid"},
		{"gemini no contents", gen, `{}`, gkey, 400, "contents is not specified"},
		{"gemini stream without alt=sse", g.URL + "/v1beta/models/m:streamGenerateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, gkey, 400, "alt=sse"},
		{"gemini an answer to no call", gen,
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`,
			gkey, 400, "function response turn comes immediately after a function call"},
		{"gemini answers", gen, `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, gkey, 200, `"text":"asked hi"`},
	} {
		status, body := post(t, c.url, c.body, c.hdr...)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s; want %d with %q", c.name, status, body, c.status, c.want)
		}
	}
}

// A script is shown which person's message it answers and how many tool
// results have come since, from the request alone.
func TestScriptSeesTheTurnSoFar(t *testing.T) {
	var got []modelwire.Turn
	a := modelwire.NewAnthropic(modelwire.Options{Script: func(tr modelwire.Turn) modelwire.Reply {
		got = append(got, tr)
		return modelwire.Reply{Text: "ok"}
	}})
	defer a.Close()
	msgs := `{"role":"user","content":"first"},{"role":"assistant","content":"ok"},` +
		`{"role":"user","content":"second"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"run_code","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"run_code","input":{}},{"type":"tool_use","id":"toolu_3","name":"run_code","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"b"},{"type":"tool_result","tool_use_id":"toolu_3","content":"c"}]}`
	code, body := post(t, a.URL+"/v1/messages", `{"model":"m","max_tokens":10,"messages":[`+msgs+`]}`, "Anthropic-Version", "2023-06-01")
	if code != 200 || len(got) != 1 {
		t.Fatalf("%d %s", code, body)
	}
	if tr := got[0]; tr.Asked != "second" || tr.Answered != 3 || len(tr.ToolResults) != 2 {
		t.Fatalf("the script saw %+v", tr)
	}
}
