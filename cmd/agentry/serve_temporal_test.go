package main

import (
	"fmt"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// serve --temporal: a turn under --check-in run_code pauses as a workflow
// waiting for a signal; the host stops and starts again on the same store;
// the decision endpoint of the new process signals the workflow, which
// runs the code once and answers.
func TestServeTemporalPauseSurvivesRestart(t *testing.T) {
	needPython(t)
	addr := temporaltest.Addr(t)
	dir := t.TempDir()
	tok, line, err := host.GenerateToken(tool.Identity{Tenant: "acme", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.txt")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := serveDefaults(t)
	o.tokens = tokens
	o.runner = "process"
	o.checkIns = []string{"run_code"}
	o.temporal = addr
	o.temporalNamespace = "default"
	o.temporalReplica = fmt.Sprintf("serve-test-%d", time.Now().UnixNano())
	marks := filepath.Join(dir, "marks")

	s := startServe(t, o)
	code, m := call(t, "POST", s.url+"/v1/sessions", tok, "")
	if code != 201 {
		t.Fatalf("open: %d %v", code, m)
	}
	id := m["sessionId"].(string)
	code, m = call(t, "POST", s.url+"/v1/sessions/"+id+"/turns", tok,
		turnBody(fmt.Sprintf("open(%q, 'a').write('x\\n')\nprint(6*7)", marks)))
	if aw, _ := m["awaiting"].(map[string]any); code != 202 || aw["tool"] != "run_code" {
		t.Fatalf("a turn under --check-in run_code: %d %v", code, m)
	}
	s.stop(t)

	s = startServe(t, o)
	defer s.stop(t)
	sess := s.url + "/v1/sessions/" + id
	if code, m = call(t, "GET", sess, tok, ""); code != 200 || m["state"] != "paused" {
		t.Fatalf("after the restart: %d %v", code, m)
	}
	if code, m = call(t, "POST", sess+"/decision", tok, `{"approve":true}`); code != 200 || m["output"] != "42" {
		t.Fatalf("approved after the restart: %d %v", code, m)
	}
	raw, err := os.ReadFile(marks)
	if err != nil || string(raw) != "x\n" {
		t.Fatalf("the code ran %q times (%v); want once", raw, err)
	}
}
