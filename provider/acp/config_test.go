package acp_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/provider/acp"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	ok := `{"command":["agent","--acp"],"env":["KEY","BASE=http://x"],"home":"/etc/home","mode":"plan",` +
		`"allowHosts":["api.example.com:443","[::1]:8080"],"workspaceRoot":"/srv/ws","fs":"write",` +
		`"limits":{"startTimeout":"30s","maxTerminals":2}}`
	c, err := acp.ParseConfig([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Limits.StartTimeout) != 30*time.Second || c.Limits.MaxTerminals != 2 ||
		time.Duration(c.Limits.StopTimeout) != acp.DefaultStopTimeout || c.Limits.TerminalOutputBytes != acp.DefaultTerminalOutputBytes ||
		c.Limits.MaxClientRequests != acp.DefaultMaxClientRequests || time.Duration(c.Limits.ClientRequestTimeout) != acp.DefaultClientRequestTimeout ||
		time.Duration(c.Limits.ClientWaitTimeout) != acp.DefaultClientWaitTimeout {
		t.Fatalf("limits %+v", c.Limits)
	}
	c, err = acp.ParseConfig([]byte(`{"command":["a"],"workspaceRoot":"/w","limits":{"maxClientRequests":4,"clientRequestTimeout":"5s","clientWaitTimeout":"2h"}}`))
	if err != nil || c.Limits.MaxClientRequests != 4 || time.Duration(c.Limits.ClientRequestTimeout) != 5*time.Second || time.Duration(c.Limits.ClientWaitTimeout) != 2*time.Hour {
		t.Fatalf("the client request limits: %+v, %v", c.Limits, err)
	}
	for _, c := range []struct{ in, field string }{
		{`[]`, ""},
		{`{"command":[],"workspaceRoot":"/w"}`, "command"},
		{`{"command":["a"]}`, "workspaceRoot"},
		{`{"command":["a"],"workspaceRoot":"w"}`, "workspaceRoot"},
		{`{"command":["a"],"workspaceRoot":"/w/../x"}`, "workspaceRoot"},
		{`{"command":[""],"workspaceRoot":"/w"}`, "command[0]"},
		{`{"command":["a"],"workspaceRoot":"/w","env":["HOME=/root"]}`, "env[0]"},
		{`{"command":["a"],"workspaceRoot":"/w","env":["1X=y"]}`, "env[0]"},
		{`{"command":["a"],"workspaceRoot":"/w","env":["K=1","K=2"]}`, "env[1]"},
		{`{"command":["a"],"workspaceRoot":"/w","allowHosts":["example.com"]}`, "allowHosts[0]"},
		{`{"command":["a"],"workspaceRoot":"/w","allowHosts":["example.com:0"]}`, "allowHosts[0]"},
		{`{"command":["a"],"workspaceRoot":"/w","allowHosts":["a:1","a:1"]}`, "allowHosts[1]"},
		{`{"command":["a"],"workspaceRoot":"/w","mode":"a\nb"}`, "mode"},
		{`{"command":["a"],"workspaceRoot":"/w","fs":"read"}`, "fs"},
		{`{"command":["a"],"workspaceRoot":"/w","limits":{"maxTerminals":1000}}`, "limits.maxTerminals"},
		{`{"command":["a"],"workspaceRoot":"/w","limits":{"stopTimeout":"-1s"}}`, "limits.stopTimeout"},
		{`{"command":["a"],"workspaceRoot":"/w","limits":{"stopTimeout":5}}`, ""},
		{`{"command":["a"],"workspaceRoot":"/w","limits":{"maxClientRequests":2000}}`, "limits.maxClientRequests"},
		{`{"command":["a"],"workspaceRoot":"/w","limits":{"clientRequestTimeout":"2h"}}`, "limits.clientRequestTimeout"},
		{`{"command":["a"],"workspaceRoot":"/w","limits":{"clientWaitTimeout":"25h"}}`, "limits.clientWaitTimeout"},
		{`{"command":["a"],"workspaceRoot":"/w","comand":["b"]}`, ""},
		{`{"command":["a"],"workspaceRoot":"/w"} {}`, ""},
	} {
		_, err := acp.ParseConfig([]byte(c.in))
		var ce *acp.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: %v; want a refusal of %q", c.in, err, c.field)
		}
	}
}

func TestParseConfigNeverQuotesEnvValues(t *testing.T) {
	t.Parallel()
	_, err := acp.ParseConfig([]byte(`{"command":["a"],"workspaceRoot":"/w","env":["KEY=sk-secret","KEY=sk-secret"]}`))
	if err == nil || strings.Contains(err.Error(), "sk-secret") {
		t.Fatalf("%v", err)
	}
}

// FuzzParseConfig: the parser never panics, refuses with a *ConfigError
// that never quotes a value, and accepts only what it accepts again after
// a round trip.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"command":["a"],"workspaceRoot":"/w"}`,
		`{"command":["claude-code-acp"],"env":["ANTHROPIC_API_KEY","PATH"],"workspaceRoot":"/srv/ws","mode":"default"}`,
		`{"command":["a"],"workspaceRoot":"/w","allowHosts":["h:1"],"limits":{"startTimeout":"1m","maxFileBytes":10}}`,
		`{"command":["a"],"workspaceRoot":"/w","env":["K=QQmarkerQQ","K=x"]}`,
		`{"command":["a","QQmarkerQQ"],"workspaceRoot":"QQmarkerQQ"}`,
		``, `{}`, `null`, `{"command":"a"}`, `{"command":["a"],"workspaceRoot":"/w","limits":{"stopTimeout":"QQmarkerQQ"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := acp.ParseConfig([]byte(in))
		if err != nil {
			var ce *acp.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			if strings.Contains(in, "QQmarkerQQ") && strings.Contains(err.Error(), "QQmarkerQQ") {
				t.Fatalf("the error quotes the input: %v", err)
			}
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := acp.ParseConfig(b)
		if err != nil {
			t.Fatalf("the parser refuses its own output %s: %v", b, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip %+v → %+v", c, again)
		}
	})
}

// FuzzParseSessionConfig: the same, for a session's configuration.
func FuzzParseSessionConfig(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"mode":"plan"}`, `{"mode":""}`, `{"mood":"x"}`, `[]`, `{"mode":"a\u0000"}`, `{"mode":1}`,
		`{"credentials":{"OPENAI_API_KEY":"sk-1"}}`, `{"credentials":{"1X":"v"}}`, `{"credentials":{"X":""}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := acp.ParseSessionConfig([]byte(in))
		if err != nil {
			return
		}
		b, _ := json.Marshal(c)
		again, err := acp.ParseSessionConfig(b)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip %+v → %+v, %v", c, again, err)
		}
	})
}
