// Command acpagent is a scripted ACP agent the cmd/agentry tests build and
// serve, jailed, to try the client's bounds from where an agent stands.
// The prompt's text chooses what it does:
//
//	hello               answers "hello back"
//	fifo                makes a FIFO in its workspace and asks the client to read it
//	flood N             sends N fs/read_text_file at once, without waiting
//	dial HOST:PORT GATE dials HOST:PORT, then waits until the test writes the
//	                    FIFO GATE in its workspace, and says how the dial went
//	hasenv VAR SHA256   says whether VAR is set to a value of that SHA-256
//	                    (never the value)
//	search MASK MASKED  unmasks MASKED (hex, XOR MASK) in memory and says
//	                    where in its jail it finds that string: its
//	                    environment, the processes it sees, the files it
//	                    can read under its workspace, HOME and temp dirs
//	edit                proposes an edit of hello.txt in its workspace (a tool
//	                    call whose content is the diff, lines with markup in
//	                    them), asks permission, and makes it if allowed
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/coder/acp-go-sdk"
)

func main() {
	a := &agent{cwd: map[sdk.SessionId]string{}}
	a.conn = sdk.NewAgentSideConnection(a, os.Stdout, os.Stdin)
	<-a.conn.Done()
}

type agent struct {
	conn *sdk.AgentSideConnection
	mu   sync.Mutex
	cwd  map[sdk.SessionId]string
}

func (a *agent) Initialize(context.Context, sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	return sdk.InitializeResponse{ProtocolVersion: sdk.ProtocolVersionNumber, AuthMethods: []sdk.AuthMethod{}}, nil
}

func (a *agent) Authenticate(context.Context, sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	return sdk.AuthenticateResponse{}, nil
}

func (a *agent) NewSession(_ context.Context, p sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := sdk.SessionId("s-" + hex.EncodeToString(b[:]))
	a.mu.Lock()
	a.cwd[id] = p.Cwd
	a.mu.Unlock()
	return sdk.NewSessionResponse{SessionId: id}, nil
}

func (a *agent) Cancel(context.Context, sdk.CancelNotification) error { return nil }

func (a *agent) ResumeSession(context.Context, sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	return sdk.ResumeSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionResume)
}

func (a *agent) CloseSession(context.Context, sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	return sdk.CloseSessionResponse{}, nil
}

func (a *agent) SetSessionMode(context.Context, sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	return sdk.SetSessionModeResponse{}, nil
}

func (a *agent) ListSessions(context.Context, sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionList)
}

func (a *agent) SetSessionConfigOption(context.Context, sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	return sdk.SetSessionConfigOptionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionSetConfigOption)
}

func (a *agent) Prompt(ctx context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	a.mu.Lock()
	cwd := a.cwd[p.SessionId]
	a.mu.Unlock()
	text := ""
	if l := len(p.Prompt); l > 0 && p.Prompt[l-1].Text != nil {
		text = p.Prompt[l-1].Text.Text
	}
	cmd, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	var answer string
	switch cmd {
	case "fifo":
		answer = a.readFIFO(ctx, p.SessionId, cwd)
	case "flood":
		n, _ := strconv.Atoi(rest)
		answer = a.flood(ctx, p.SessionId, cwd, n)
	case "edit":
		answer = a.edit(ctx, p.SessionId, cwd)
	case "dial":
		target, gate, _ := strings.Cut(rest, " ")
		answer = dial(target, filepath.Join(cwd, gate))
	case "hasenv":
		name, sum, _ := strings.Cut(rest, " ")
		answer = hasEnv(name, sum)
	case "search":
		mask, masked, _ := strings.Cut(rest, " ")
		answer = search(cwd, mask, masked)
	default:
		answer = "hello back"
	}
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: p.SessionId, Update: sdk.UpdateAgentMessageText(answer)})
	return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
}

func (a *agent) readFIFO(ctx context.Context, id sdk.SessionId, cwd string) string {
	path := filepath.Join(cwd, "fifo")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		return "mkfifo: " + err.Error()
	}
	_, err := a.conn.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: id, Path: path})
	if err != nil {
		return "the read failed: " + err.Error()
	}
	return "the read succeeded"
}

func (a *agent) flood(ctx context.Context, id sdk.SessionId, cwd string, n int) string {
	path := filepath.Join(cwd, "small.txt")
	if err := os.WriteFile(path, []byte("small"), 0o644); err != nil {
		return "write: " + err.Error()
	}
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for range n {
		wg.Go(func() {
			if _, err := a.conn.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: id, Path: path}); err != nil {
				refused.Add(1)
			} else {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return fmt.Sprintf("read %d, refused %d", ok.Load(), refused.Load())
}

func dial(target, gate string) string {
	c, err := net.DialTimeout("tcp", target, 10*time.Second)
	result := "connected"
	if err != nil {
		result = "refused: " + err.Error()
	} else {
		c.Close()
	}
	b := make([]byte, 8)
	f, err := os.Open(gate) // the test's FIFO: waits for the test to write it
	if err != nil {
		return "gate: " + err.Error()
	}
	_, _ = f.Read(b)
	f.Close()
	return "dialled " + target + ": " + result
}

func hasEnv(name, sum string) string {
	v, ok := os.LookupEnv(name)
	switch {
	case !ok:
		return "env " + name + " unset"
	case fmt.Sprintf("%x", sha256.Sum256([]byte(v))) == sum:
		return "env " + name + " matches"
	}
	return "env " + name + " differs"
}

// search looks for the unmasked string wherever this jail lets the agent
// look, and names the places it is found ("absent" when none).
func search(cwd, maskHex, maskedHex string) string {
	mask, err1 := hex.DecodeString(maskHex)
	masked, err2 := hex.DecodeString(maskedHex)
	if err1 != nil || err2 != nil || len(mask) != len(masked) || len(mask) == 0 {
		return "search: bad arguments"
	}
	needle := make([]byte, len(mask))
	for i := range mask {
		needle[i] = mask[i] ^ masked[i]
	}
	var found []string
	for _, kv := range os.Environ() {
		if bytes.Contains([]byte(kv), needle) {
			found = append(found, "own environment")
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"environ", "cmdline"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(b, needle) {
				found = append(found, p+"/"+f)
			}
		}
	}
	files := 0
	for _, root := range []string{cwd, os.Getenv("HOME"), "/tmp", "/var/tmp", "/dev/shm", "/run"} {
		if root == "" {
			continue
		}
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Size() > 8<<20 {
				return nil
			}
			files++
			if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, needle) {
				found = append(found, path)
			}
			return nil
		})
	}
	if len(found) == 0 {
		return fmt.Sprintf("absent (%d processes, %d files searched)", len(procs), files)
	}
	return "found in " + strings.Join(found, ", ")
}

// The edit's old and new text: lines a console must show as text.
const (
	editOld = "hello\n<b>old</b>\nbye\n"
	editNew = "hello\n<script>alert(1)</script>\nbye\n"
)

func (a *agent) edit(ctx context.Context, id sdk.SessionId, cwd string) string {
	path := filepath.Join(cwd, "hello.txt")
	if err := os.WriteFile(path, []byte(editOld), 0o644); err != nil {
		return "write: " + err.Error()
	}
	diff := []sdk.ToolCallContent{sdk.ToolDiffContent(path, editNew, editOld)}
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: id, Update: sdk.StartToolCall("edit-1", "Edit hello.txt",
		sdk.WithStartKind(sdk.ToolKindEdit), sdk.WithStartStatus(sdk.ToolCallStatusPending), sdk.WithStartContent(diff))})
	resp, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{SessionId: id,
		ToolCall: sdk.ToolCallUpdate{ToolCallId: "edit-1", Title: sdk.Ptr("Edit hello.txt"), Content: diff},
		Options: []sdk.PermissionOption{
			{OptionId: "yes", Name: "Allow", Kind: sdk.PermissionOptionKindAllowOnce},
			{OptionId: "no", Name: "Reject", Kind: sdk.PermissionOptionKindRejectOnce},
		}})
	if err != nil {
		return "permission: " + err.Error()
	}
	if resp.Outcome.Selected == nil || resp.Outcome.Selected.OptionId != "yes" {
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: id, Update: sdk.UpdateToolCall("edit-1", sdk.WithUpdateStatus(sdk.ToolCallStatusFailed),
			sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("not allowed"))}))})
		return "the edit was not allowed"
	}
	if err := os.WriteFile(path, []byte(editNew), 0o644); err != nil {
		return "write: " + err.Error()
	}
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: id, Update: sdk.UpdateToolCall("edit-1", sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted),
		sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("edited hello.txt"))}))})
	return "edited hello.txt"
}
