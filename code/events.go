package code

import "github.com/agentry-dev/agentry/event"

// TypeRun is the event [NewTool] emits for each execution of model-written
// code; its payload is a *RunReport. init registers it with package event.
const TypeRun event.Type = "agentry.tools.code_run"

func init() {
	event.Register(TypeRun, func() any { return new(RunReport) })
}

// RunReport describes one execution of model-written code: facts only,
// never the code or its output.
type RunReport struct {
	Tool         string  `json:"tool"`
	RunnerID     string  `json:"runnerId"`
	Language     string  `json:"language"`
	OK           bool    `json:"ok"`
	ExitCode     *int    `json:"exitCode,omitempty"`
	OutputChars  int     `json:"outputChars"`
	Truncated    bool    `json:"truncated"`
	StagedInputs int     `json:"stagedInputs"`
	ShapeHash    string  `json:"shapeHash"`
	DurationMs   float64 `json:"durationMs"`
	// StateLost is true when the session was lost before or while running
	// this code (it broke or was closed): the model was told the code may
	// or may not have run, and it was not run again.
	StateLost bool   `json:"stateLost,omitempty"`
	Error     string `json:"error,omitempty"`
}
