package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentry-dev/agentry/llm"
)

// CalculatorTool is the tool the calculator calls.
const CalculatorTool = "run_code"

// Calculator returns an offline model that is honest about what it is: not
// a language model, but a relay from a person's code to the run_code tool.
// Given a user message, it finds the code in it (see [ExtractCode]), calls
// run_code with {"code": ...}, and answers with what the tool returned. It
// is stateless and safe for concurrent use.
func Calculator() *Calc { return &Calc{} }

// Calc is the model [Calculator] returns.
type Calc struct{}

// Name says plainly what this model is.
func (*Calc) Name() string { return "scripted-calculator (not a language model)" }

// Generate looks only at the last message: a person's message becomes a
// run_code call, and that call's result becomes the answer.
func (*Calc) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	if len(req.Messages) == 0 {
		return llm.Response{}, fmt.Errorf("scripted calculator: the request has no messages; send the code to run")
	}
	last := req.Messages[len(req.Messages)-1]
	switch last.Role {
	case llm.RoleUser:
		if !hasTool(req.Tools, CalculatorTool) {
			return llm.Response{}, fmt.Errorf("scripted calculator: the agent offers no %s tool; give it one (code.NewTool)", CalculatorTool)
		}
		code, ok := ExtractCode(last.Content)
		if !ok {
			return llm.Response{Model: "scripted-calculator", StopReason: llm.StopEnd,
				Text: "I am a scripted calculator, not a language model: send me a program, or code in a ``` fenced block, and I will run it."}, nil
		}
		args, err := json.Marshal(struct {
			Code string `json:"code"`
		}{code})
		if err != nil {
			return llm.Response{}, fmt.Errorf("scripted calculator: %w", err)
		}
		n := 0
		for i := range req.Messages {
			if req.Messages[i].Role == llm.RoleAssistant {
				n++
			}
		}
		return llm.Response{
			Model:      "scripted-calculator",
			StopReason: llm.StopToolUse,
			ToolCalls:  []llm.ToolCall{{ID: fmt.Sprintf("calc_%d", n), Name: CalculatorTool, Args: args}},
		}, nil
	case llm.RoleTool:
		out := strings.TrimSpace(last.Content)
		if last.IsError {
			out = "The code could not run: " + out
		} else if out == "" {
			out = "The code ran and printed nothing."
		}
		return llm.Response{Model: "scripted-calculator", StopReason: llm.StopEnd, Text: out}, nil
	}
	return llm.Response{}, fmt.Errorf("scripted calculator: the last message is from %q; it answers only a person's message or a tool result", last.Role)
}

func hasTool(defs []llm.ToolDef, name string) bool {
	for _, d := range defs {
		if d.Name == name {
			return true
		}
	}
	return false
}

// ExtractCode finds the program in a message: the body of the first ```
// fenced block when there is one (an unclosed fence runs to the end), or
// else the whole message as a bare program. A bare arithmetic expression
// such as "2 + 2*3" becomes print(2 + 2*3), so it prints its value. ok is
// false when no code is left after trimming.
func ExtractCode(msg string) (code string, ok bool) {
	if body, found := fenced(msg); found {
		body = strings.Trim(body, "\r\n")
		if strings.TrimSpace(body) == "" {
			return "", false
		}
		return body, true
	}
	code = strings.TrimSpace(msg)
	if code == "" {
		return "", false
	}
	if isArithmetic(code) {
		return "print(" + code + ")", true
	}
	return code, true
}

// fenced returns the body of the first ``` block. The opening fence may
// carry a language tag; its line is not part of the body.
func fenced(msg string) (string, bool) {
	start := strings.Index(msg, "```")
	if start < 0 {
		return "", false
	}
	rest := msg[start+3:]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 {
		// "```print(1)```" on one line: the body sits between the fences.
		body, _, _ := strings.Cut(rest, "```")
		return body, true
	}
	rest = rest[nl+1:]
	if end := strings.Index(rest, "```"); end >= 0 {
		return rest[:end], true
	}
	return rest, true
}

func isArithmetic(s string) bool {
	digits := false
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits = true
		case strings.ContainsRune(" \t+-*/%().", r):
		default:
			return false
		}
	}
	return digits
}
