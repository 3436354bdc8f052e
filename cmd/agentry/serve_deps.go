package main

import (
	"context"
	"io"
	"os"

	"github.com/agentry-dev/agentry/llm/scripted"
)

// buildServeDeps builds the model, tools and sinks `agentry serve` runs
// with.
func buildServeDeps(ctx context.Context, o serveOptions, warn io.Writer) (serveDeps, error) {
	m, err := parseModel(o.model, os.Getenv)
	if err != nil {
		return serveDeps{}, err
	}
	if m == nil {
		m = scripted.Calculator()
	}
	if o.events != "" {
		return serveDeps{}, usageError("--events: this build has no events file sink yet; pass --events ''")
	}
	_ = ctx
	_ = warn
	return serveDeps{model: m, close: func() {}}, nil
}
