package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func call(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(res.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %s", method, url, res.StatusCode, b)
		}
	}
	return res.StatusCode, m
}

// --check-in run_code: no model-written code runs without a person's yes;
// a yes runs it, a no does not, and says why.
func TestServeCheckIn(t *testing.T) {
	needPython(t)
	o := serveDefaults(t)
	o.runner = "process"
	o.checkIns = []string{"run_code"}
	s := startServe(t, o)
	defer s.stop(t)

	code, m := call(t, "POST", s.url+"/v1/sessions", s.token, "")
	if code != 201 {
		t.Fatalf("open: %d %v", code, m)
	}
	sess := s.url + "/v1/sessions/" + m["sessionId"].(string)

	code, m = call(t, "POST", sess+"/turns", s.token, turnBody("print(6*7)"))
	aw, _ := m["awaiting"].(map[string]any)
	if code != 202 || aw["tool"] != "run_code" {
		t.Fatalf("a turn under --check-in run_code: %d %v", code, m)
	}
	if code, m = call(t, "GET", sess, s.token, ""); code != 200 || m["state"] != "paused" {
		t.Fatalf("while it waits: %d %v", code, m)
	}
	if code, m = call(t, "POST", sess+"/decision", s.token, `{"approve":true}`); code != 200 || m["output"] != "42" {
		t.Fatalf("approved: %d %v", code, m)
	}

	if code, m = call(t, "POST", sess+"/turns", s.token, turnBody("print('ran')")); code != 202 {
		t.Fatalf("second turn: %d %v", code, m)
	}
	code, m = call(t, "POST", sess+"/decision", s.token, `{"approve":false,"note":"not today"}`)
	out, _ := m["output"].(string)
	if code != 200 || out == "ran" || !strings.Contains(out, "not today") {
		t.Fatalf("declined: %d %v (want an answer that did not run the code and carries the note)", code, m)
	}
	t.Logf("declined: %q", out)
}

func TestServeCheckInUnknownTool(t *testing.T) {
	o := serveDefaults(t)
	o.runner = "process"
	o.checkIns = []string{"run_code", "deploy"}
	err := runServe(context.Background(), o, io.Discard, io.Discard, nil, nil)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), `"deploy"`) || !strings.Contains(err.Error(), "run_code") {
		t.Fatalf("want a usage error naming deploy and the tools there are: %v", err)
	}
}
