// Package code is the port to code runners and the tool that holds one
// runner session per isolation key.
//
// A [Runner] starts a [Session] for an isolation key; a session executes
// code any number of times and is stopped once. [NewTool] turns a runner
// into a tool.Tool whose sessions are registered with the door's teardown
// tier, so they close at the end of the call, run or conversation. Each
// execution is reported as an agentry.tools.code_run event ([TypeRun],
// [RunReport]): facts, never the code or its output.
//
// Doctrine: summarize prose, compute data. Output that is cut is always
// stated to the model; data that goes in is staged as files, never pasted.
package code

import (
	"context"
	"errors"
	"time"

	"github.com/agentry-dev/agentry/tool"
)

// Errors a runner wraps so callers can tell what happened with errors.Is.
var (
	// ErrStopped: the session was stopped; Execute never starts a fresh
	// one in its place.
	ErrStopped = errors.New("code: session stopped")
	// ErrBroken: the session can no longer run code (its interpreter timed
	// out or crashed) and its state is gone. Open a fresh session.
	ErrBroken = errors.New("code: session broken")
	// ErrTimeout: the execution ran past its timeout and was killed.
	ErrTimeout = errors.New("code: execution timed out")
)

// StateKeeper is optional on a Runner: KeepsState reports whether
// variables and imports survive from one Execute to the next within a
// session (a persistent interpreter) or only files do (a process per
// call). A runner that does not implement it is taken to keep state.
type StateKeeper interface {
	KeepsState() bool
}

// Runner starts sessions. Implementations are safe for concurrent use.
type Runner interface {
	// ID names the backend in events ("local-process", "agentcore", ...).
	ID() string
	// Start opens a session for req.Key. A runner may name a remote
	// session with toolsession.HashKey(req.Key); it never sends the raw
	// key out of the process and never widens it.
	Start(ctx context.Context, req StartRequest) (Session, error)
}

// StartRequest asks a runner for a session.
type StartRequest struct {
	Key      string
	Language string
}

// Session is one live execution environment.
type Session interface {
	ID() string
	// Execute runs code. A non-zero exit is a Result with OK false, not an
	// error; errors mean the code could not run at all (unknown language,
	// interpreter missing, timeout kill, stopped session).
	Execute(ctx context.Context, req ExecRequest) (Result, error)
	// Stop is idempotent and tolerates a session the far side already
	// reaped. After Stop, Execute fails naming the stopped session.
	Stop(ctx context.Context) error
}

// Stager is optional on a Session: it lands inputs as files the code can
// read. Every later execute sees AGENTRY_INPUTS, a JSON object name → path.
type Stager interface {
	Stage(ctx context.Context, in []Input) ([]Staged, error)
}

// Input is data handed to the code as a file.
type Input struct {
	// Name is caller data; runners encode it into one safe file name.
	Name string
	Data []byte
}

// Staged says where an input landed.
type Staged struct {
	Name  string
	Path  string
	Bytes int
}

// ExecRequest is one execution.
type ExecRequest struct {
	Code     string
	Language string
	// Timeout bounds the execution; 0 takes the runner's default.
	Timeout time.Duration
}

// Result is what one execution produced.
type Result struct {
	OK       bool
	Stdout   string
	Stderr   string
	ExitCode *int
	// Artifacts is nil when the runner does not report outputs, and empty
	// when it reports that there were none.
	Artifacts []Artifact
	// Truncated is non-nil only when something was cut.
	Truncated *Truncation
	// Sandbox is what the execute used, from the session's control group;
	// nil when the runner's sessions have none.
	Sandbox *tool.SandboxUsage
}

// Artifact is a file or object the code produced.
type Artifact struct {
	Name  string
	Bytes int64
	URI   string
}

// Truncation says what was cut: which streams and how long the output
// was, and whether the artifact list was cut and from how many.
type Truncation struct {
	Stdout, Stderr bool
	// OfChars is the original length, in characters, of the longest cut
	// stream.
	OfChars int
	// Artifacts is true when Result.Artifacts lists only some of what the
	// code produced; OfArtifacts is how many there were (0: unknown).
	Artifacts   bool
	OfArtifacts int
}

// InputsEnv is the environment variable that maps staged input names to
// paths (a JSON object).
const InputsEnv = "AGENTRY_INPUTS"
