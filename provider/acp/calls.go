package acp

import (
	"encoding/json"
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/provider"
)

// callOf is the tool call a session/update is about, for the host to show
// the person: a tool_call's input (a file edit's diff as the agent sent
// it, else its raw input), and a tool_call_update's output once the call
// completed or failed. Nil when the update is about no call.
func callOf(u sdk.SessionUpdate) *provider.CallDetail {
	switch {
	case u.ToolCall != nil:
		tc := u.ToolCall
		c := &provider.CallDetail{ID: string(tc.ToolCallId), Tool: callName(tc.Title, string(tc.Kind)), Input: callInput(tc.Content, tc.RawInput)}
		setOutput(c, tc.Status, tc.Content, tc.RawOutput)
		return c
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		title, kind := "", ""
		if tc.Title != nil {
			title = *tc.Title
		}
		if tc.Kind != nil {
			kind = string(*tc.Kind)
		}
		c := &provider.CallDetail{ID: string(tc.ToolCallId), Tool: callName(title, kind), Input: callInput(tc.Content, tc.RawInput)}
		if tc.Status != nil {
			setOutput(c, *tc.Status, tc.Content, tc.RawOutput)
		}
		return c
	}
	return nil
}

func callName(title, kind string) string {
	if title != "" {
		return title
	}
	return kind
}

// callInput is what a call is about: a file edit's diff as the agent sent
// it ({"path","oldText","newText"}; oldText absent for a new file), else
// the call's raw input when it is a JSON object, else nil.
func callInput(content []sdk.ToolCallContent, raw any) json.RawMessage {
	for _, c := range content {
		if d := c.Diff; d != nil {
			b, err := json.Marshal(struct {
				Path    string  `json:"path"`
				OldText *string `json:"oldText,omitempty"`
				NewText string  `json:"newText"`
			}{d.Path, d.OldText, d.NewText})
			if err == nil {
				return b
			}
		}
	}
	if raw == nil {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil || len(b) == 0 || b[0] != '{' {
		return nil
	}
	return b
}

// setOutput records a call's end: the text of its content, else its raw
// output as JSON.
func setOutput(c *provider.CallDetail, st sdk.ToolCallStatus, content []sdk.ToolCallContent, raw any) {
	if st != sdk.ToolCallStatusCompleted && st != sdk.ToolCallStatusFailed {
		return
	}
	c.Ended, c.IsError = true, st == sdk.ToolCallStatusFailed
	var parts []string
	for _, x := range content {
		if x.Content != nil {
			if t := blockText(x.Content.Content); t != "" {
				parts = append(parts, t)
			}
		}
	}
	if len(parts) > 0 {
		c.Output = strings.Join(parts, "\n")
		return
	}
	if raw != nil {
		if b, err := json.Marshal(raw); err == nil {
			c.Output = string(b)
		}
	}
}
