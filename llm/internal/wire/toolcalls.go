package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentry-dev/agentry/llm"
)

// Bounds on what a server may stream into one response.
const (
	MaxArgsBytes = 4 << 20 // the arguments of one tool call
	MaxCalls     = 256     // tool calls in one response
)

const jsonSpace = " \t\r\n"

// Args checks raw tool arguments and returns them compacted. Empty or
// null arguments are the empty object, which is what a tool without
// parameters receives.
func Args(raw []byte) (json.RawMessage, error) {
	raw = bytes.Trim(raw, jsonSpace) // only JSON's own white space: "\f0" is not JSON
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`{}`), nil
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, errors.New("its arguments are not valid JSON")
	}
	return json.RawMessage(out.Bytes()), nil
}

// Call builds a checked tool call. A call without an id gets "call_<n>"
// (n counts from 1 in the response) so that its result can be paired.
func Call(n int, id, name string, raw []byte) (llm.ToolCall, error) {
	if id == "" {
		id = fmt.Sprintf("call_%d", n)
	}
	if name == "" {
		return llm.ToolCall{}, fmt.Errorf("%w: call %s has no tool name", llm.ErrBadToolCall, id)
	}
	args, err := Args(raw)
	if err != nil {
		return llm.ToolCall{}, fmt.Errorf("%w: tool %q (call %s): %v", llm.ErrBadToolCall, name, id, err)
	}
	return llm.ToolCall{ID: id, Name: name, Args: args}, nil
}

// BadCall turns an error of [Call] or [Calls] into the adapter's error.
func (t Target) BadCall(err error) *llm.APIError {
	msg := strings.TrimPrefix(err.Error(), llm.ErrBadToolCall.Error()+": ")
	return t.apiError(llm.ErrBadToolCall, 0, t.Clean(msg), "ask again; if it keeps happening, the model may need a simpler tool schema")
}

// Calls assembles tool calls that arrive in pieces across stream chunks.
// The zero value is ready to use; it is not safe for concurrent use.
type Calls struct {
	list []*pending
	open map[int64]*pending // the latest call begun at each stream index
}

type pending struct {
	n        int
	id, name string
	args     []byte
	done     bool
}

// Delta adds one piece of a streamed tool call. A piece begins a new call
// when its index is new, when the call at its index is finished, or when
// it names an id other than that call's: some servers send every call at
// index 0, telling them apart only by id.
func (c *Calls) Delta(index int64, id, name, args string) error {
	if c.open == nil {
		c.open = map[int64]*pending{}
	}
	p := c.open[index]
	if p == nil || p.done || (id != "" && p.id != "" && id != p.id) {
		if len(c.list) >= MaxCalls {
			return fmt.Errorf("%w: more than %d tool calls in one response", llm.ErrBadToolCall, MaxCalls)
		}
		p = &pending{n: len(c.list) + 1}
		c.list = append(c.list, p)
		c.open[index] = p
	}
	if p.id == "" {
		p.id = id
	}
	if p.name == "" {
		p.name = name
	}
	if len(p.args)+len(args) > MaxArgsBytes {
		return fmt.Errorf("%w: tool %q: arguments longer than %d bytes", llm.ErrBadToolCall, p.name, MaxArgsBytes)
	}
	p.args = append(p.args, args...)
	return nil
}

// Finish completes the call open at index. ok is false when there is none.
func (c *Calls) Finish(index int64) (call llm.ToolCall, ok bool, err error) {
	p := c.open[index]
	if p == nil || p.done {
		return llm.ToolCall{}, false, nil
	}
	p.done = true
	call, err = Call(p.n, p.id, p.name, p.args)
	return call, err == nil, err
}

// Rest completes every call not yet finished, in the order they began.
func (c *Calls) Rest() ([]llm.ToolCall, error) {
	var out []llm.ToolCall
	for _, p := range c.list {
		if p.done {
			continue
		}
		p.done = true
		call, err := Call(p.n, p.id, p.name, p.args)
		if err != nil {
			return nil, err
		}
		out = append(out, call)
	}
	return out, nil
}
