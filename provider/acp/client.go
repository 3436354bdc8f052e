package acp

import (
	"context"
	"errors"
	"strings"

	sdk "github.com/coder/acp-go-sdk"
)

// refusingClient answers a probe's agent, which has no session: it
// refuses everything but notifications.
type refusingClient struct{}

var errNoSession = errors.New("acp: this connection has no session")

func (refusingClient) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, errNoSession
}
func (refusingClient) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, errNoSession
}
func (refusingClient) RequestPermission(context.Context, sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{}}}, nil
}
func (refusingClient) SessionUpdate(context.Context, sdk.SessionNotification) error { return nil }
func (refusingClient) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, errNoSession
}
func (refusingClient) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, errNoSession
}
func (refusingClient) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, errNoSession
}
func (refusingClient) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, errNoSession
}
func (refusingClient) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, errNoSession
}

// errReadsNotOffered refuses a read the client did not offer.
var errReadsNotOffered = errors.New("this client offers no file reads (the capability was not given); read the file yourself")

// client is what one session's agent calls: session updates and
// permission requests go to the session's turn; files and terminals are
// confined to the session's workspace. Every request reached it through
// the session's guard (at most limits.maxClientRequests in flight); one
// that waits is bounded: on a person or a command by
// limits.clientWaitTimeout, on the client (a terminal's start or
// release) by limits.clientRequestTimeout. The rest never wait: a file
// is opened non-blocking and read or written up to limits.maxFileBytes.
type client struct {
	s *session
}

var _ sdk.Client = (*client)(nil)

// codeResourceNotFound is ACP's error code for a resource, such as a
// file, that does not exist.
const codeResourceNotFound = -32002

// refusal is an error the agent is told, as a JSON-RPC invalid-params
// error carrying the reason.
func refusal(op string, err error) error {
	return &sdk.RequestError{Code: -32602, Message: op + " refused: " + err.Error()}
}

func (c *client) mine(id sdk.SessionId) error {
	if b := c.s.boundTo(); b != "" && string(id) != b {
		return errors.New("the session id is not this connection's session")
	}
	return nil
}

func (c *client) ReadTextFile(_ context.Context, p sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	ev := &FileEvent{Op: "read"}
	defer c.s.emit(TypeFile, ev)
	if c.s.in.cfg.FS == FSWrite {
		ev.Refused, ev.Error = true, errReadsNotOffered.Error()
		return sdk.ReadTextFileResponse{}, refusal("fs/read_text_file", errReadsNotOffered)
	}
	if err := c.mine(p.SessionId); err != nil {
		ev.Refused, ev.Error = true, err.Error()
		return sdk.ReadTextFileResponse{}, refusal("fs/read_text_file", err)
	}
	rel, err := c.s.ws.rel(p.Path)
	if err != nil {
		ev.Refused, ev.Error = true, err.Error()
		return sdk.ReadTextFileResponse{}, refusal("fs/read_text_file", err)
	}
	ev.Path = rel
	line, limit := 0, 0
	if p.Line != nil {
		line = *p.Line
	}
	if p.Limit != nil {
		limit = *p.Limit
	}
	text, err := c.s.ws.read(rel, line, limit)
	if err != nil {
		ev.Refused, ev.Error = errors.Is(err, errOutside), err.Error()
		if ev.Refused {
			ev.Path = ""
		} else if errors.Is(err, errNoFile) {
			// ACP's own code for it, so an agent can tell "create it" from
			// "you may not".
			return sdk.ReadTextFileResponse{}, &sdk.RequestError{Code: codeResourceNotFound,
				Message: "fs/read_text_file: " + rel + " does not exist", Data: map[string]string{"path": rel}}
		}
		return sdk.ReadTextFileResponse{}, refusal("fs/read_text_file", err)
	}
	ev.Bytes = len(text)
	return sdk.ReadTextFileResponse{Content: text}, nil
}

func (c *client) WriteTextFile(_ context.Context, p sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	ev := &FileEvent{Op: "write"}
	defer c.s.emit(TypeFile, ev)
	if err := c.mine(p.SessionId); err != nil {
		ev.Refused, ev.Error = true, err.Error()
		return sdk.WriteTextFileResponse{}, refusal("fs/write_text_file", err)
	}
	rel, err := c.s.ws.rel(p.Path)
	if err != nil {
		ev.Refused, ev.Error = true, err.Error()
		return sdk.WriteTextFileResponse{}, refusal("fs/write_text_file", err)
	}
	ev.Path = rel
	if err := c.s.ws.write(rel, p.Content); err != nil {
		ev.Refused, ev.Error = errors.Is(err, errOutside), err.Error()
		if ev.Refused {
			ev.Path = ""
		}
		return sdk.WriteTextFileResponse{}, refusal("fs/write_text_file", err)
	}
	ev.Bytes = len(p.Content)
	return sdk.WriteTextFileResponse{}, nil
}

func (c *client) SessionUpdate(ctx context.Context, n sdk.SessionNotification) error {
	if c.mine(n.SessionId) != nil {
		return nil
	}
	c.s.update(ctx, n.Update)
	return nil
}

func (c *client) RequestPermission(ctx context.Context, p sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	ctx, cancel := deadline(ctx, c.s.in.cfg.Limits, true)
	defer cancel()
	if err := c.mine(p.SessionId); err != nil {
		return sdk.RequestPermissionResponse{}, refusal("session/request_permission", err)
	}
	return c.s.permission(ctx, p), nil
}

// UnstableCreateElicitation asks the person through the session's
// interactions (see elicit).
func (c *client) UnstableCreateElicitation(ctx context.Context, p sdk.UnstableCreateElicitationRequest) (sdk.UnstableCreateElicitationResponse, error) {
	ctx, cancel := deadline(ctx, c.s.in.cfg.Limits, true)
	defer cancel()
	return c.s.elicit(ctx, p), nil
}

// UnstableCompleteElicitation is the agent saying a URL elicitation is
// over; the question it became was answered already, so there is
// nothing to do.
func (c *client) UnstableCompleteElicitation(context.Context, sdk.UnstableCompleteElicitationNotification) error {
	return nil
}

func (c *client) CreateTerminal(ctx context.Context, p sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	ctx, cancel := deadline(ctx, c.s.in.cfg.Limits, false)
	defer cancel()
	if err := c.mine(p.SessionId); err != nil {
		return sdk.CreateTerminalResponse{}, refusal("terminal/create", err)
	}
	cwd := ""
	if p.Cwd != nil {
		cwd = *p.Cwd
	}
	env := make([]string, 0, len(p.Env))
	for _, e := range p.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	limit := 0
	if p.OutputByteLimit != nil {
		limit = *p.OutputByteLimit
	}
	id, err := c.s.terms.create(ctx, p.Command, p.Args, cwd, env, limit)
	if err != nil {
		return sdk.CreateTerminalResponse{}, refusal("terminal/create", err)
	}
	return sdk.CreateTerminalResponse{TerminalId: id}, nil
}

func (c *client) TerminalOutput(_ context.Context, p sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	if err := c.mine(p.SessionId); err != nil {
		return sdk.TerminalOutputResponse{}, refusal("terminal/output", err)
	}
	out, truncated, code, signal, exited, err := c.s.terms.output(p.TerminalId)
	if err != nil {
		return sdk.TerminalOutputResponse{}, refusal("terminal/output", err)
	}
	r := sdk.TerminalOutputResponse{Output: out, Truncated: truncated}
	if exited {
		r.ExitStatus = &sdk.TerminalExitStatus{ExitCode: code}
		if signal != "" {
			r.ExitStatus.Signal = &signal
		}
	}
	return r, nil
}

func (c *client) WaitForTerminalExit(ctx context.Context, p sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	ctx, cancel := deadline(ctx, c.s.in.cfg.Limits, true)
	defer cancel()
	if err := c.mine(p.SessionId); err != nil {
		return sdk.WaitForTerminalExitResponse{}, refusal("terminal/wait_for_exit", err)
	}
	code, signal, err := c.s.terms.waitForExit(ctx, p.TerminalId)
	if err != nil {
		return sdk.WaitForTerminalExitResponse{}, refusal("terminal/wait_for_exit", err)
	}
	r := sdk.WaitForTerminalExitResponse{ExitCode: code}
	if signal != "" {
		r.Signal = &signal
	}
	return r, nil
}

func (c *client) KillTerminal(_ context.Context, p sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	if err := c.mine(p.SessionId); err != nil {
		return sdk.KillTerminalResponse{}, refusal("terminal/kill", err)
	}
	if err := c.s.terms.kill(p.TerminalId); err != nil {
		return sdk.KillTerminalResponse{}, refusal("terminal/kill", err)
	}
	return sdk.KillTerminalResponse{}, nil
}

func (c *client) ReleaseTerminal(ctx context.Context, p sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	ctx, cancel := deadline(ctx, c.s.in.cfg.Limits, false)
	defer cancel()
	if err := c.mine(p.SessionId); err != nil {
		return sdk.ReleaseTerminalResponse{}, refusal("terminal/release", err)
	}
	if err := c.s.terms.release(ctx, p.TerminalId); err != nil {
		return sdk.ReleaseTerminalResponse{}, refusal("terminal/release", err)
	}
	return sdk.ReleaseTerminalResponse{}, nil
}

// describeUpdate maps a session update to what a turn outputs: text for
// the agent's message, an activity for the rest worth telling (thoughts,
// tool calls and their progress, plans, usage, a mode change). Updates
// that say nothing a host shows (commands, config, titles, replayed user
// messages) give nothing.
func describeUpdate(u sdk.SessionUpdate) (text string, activity string) {
	switch {
	case u.AgentMessageChunk != nil:
		return blockText(u.AgentMessageChunk.Content), ""
	case u.AgentThoughtChunk != nil:
		if t := blockText(u.AgentThoughtChunk.Content); t != "" {
			return "", "thinking: " + t
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		s := "tool call " + string(tc.ToolCallId) + ": " + tc.Title
		var facts []string
		if tc.Kind != "" {
			facts = append(facts, string(tc.Kind))
		}
		if tc.Status != "" {
			facts = append(facts, string(tc.Status))
		}
		if len(facts) > 0 {
			s += " (" + strings.Join(facts, ", ") + ")"
		}
		return "", s
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		s := "tool call " + string(tc.ToolCallId)
		if tc.Title != nil {
			s += ": " + *tc.Title
		}
		if tc.Status != nil {
			s += " " + string(*tc.Status)
		} else if tc.Title == nil {
			s += " updated"
		}
		return "", s
	case u.Plan != nil:
		parts := make([]string, 0, len(u.Plan.Entries))
		for _, e := range u.Plan.Entries {
			parts = append(parts, "["+string(e.Status)+"] "+e.Content)
		}
		return "", "plan: " + strings.Join(parts, "; ")
	case u.UsageUpdate != nil:
		return "", "context: " + itoa(u.UsageUpdate.Used) + " of " + itoa(u.UsageUpdate.Size) + " tokens used"
	case u.CurrentModeUpdate != nil:
		return "", "mode: " + string(u.CurrentModeUpdate.CurrentModeId)
	}
	return "", ""
}

func blockText(b sdk.ContentBlock) string {
	switch {
	case b.Text != nil:
		return b.Text.Text
	case b.ResourceLink != nil:
		return "[" + b.ResourceLink.Name + "](" + b.ResourceLink.Uri + ")"
	}
	return ""
}
