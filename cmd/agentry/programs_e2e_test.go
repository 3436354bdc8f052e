package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// programsSep parts the programs of one message (programsMessage).
const programsSep = "\n# next call\n"

// programsModel is a model on Anthropic's wire, closed with the test,
// that runs the programs of the person's message through run_code, one
// call after another, then answers with their results (or with a failed
// call's). The person's words are the message's last text part: a note
// the host sends as context (after a takeover) is a part of its own
// before them.
func programsModel(t *testing.T) *modelwire.Server {
	t.Helper()
	model := modelwire.NewAnthropic(modelwire.Options{Script: func(tr modelwire.Turn) modelwire.Reply {
		asked := tr.Asked
		if n := len(tr.AskedParts); n > 0 {
			asked = tr.AskedParts[n-1]
		}
		steps := strings.Split(asked, programsSep)
		if tr.ToolErrors || tr.Answered >= len(steps) {
			return modelwire.Reply{Text: strings.TrimSpace(strings.Join(tr.ToolResults, "\n"))}
		}
		args, _ := json.Marshal(map[string]string{"code": steps[tr.Answered]})
		return modelwire.Reply{Calls: []modelwire.Call{{Name: modelwire.ToolName, Args: args}}}
	}})
	t.Cleanup(model.Close)
	return model
}

// programsMessage is a turn's body whose message programsModel runs as
// one run_code call a program.
func programsMessage(programs ...string) string {
	b, _ := json.Marshal(map[string]string{"message": strings.Join(programs, programsSep)})
	return string(b)
}

// anthropicOfflineEnv is the environment of a serve whose model is the
// local server at modelURL, on Anthropic's wire.
func anthropicOfflineEnv(modelURL string) []string {
	return []string{"ANTHROPIC_BASE_URL=" + modelURL, "ANTHROPIC_API_KEY=sk-ant-offline"}
}
