package main

import (
	"context"
	"io"

	"github.com/agentry-dev/agentry/llm/scripted"
)

// buildServeDeps builds the model, tools and sinks `agentry serve` runs
// with.
func buildServeDeps(ctx context.Context, o serveOptions, warn io.Writer) (serveDeps, error) {
	if o.model != "scripted" {
		return serveDeps{}, usageError("--model %q: this build serves the scripted model only", o.model)
	}
	if o.events != "" {
		return serveDeps{}, usageError("--events: this build has no events file sink yet; pass --events ''")
	}
	_ = ctx
	_ = warn
	return serveDeps{model: scripted.Calculator(), close: func() {}}, nil
}
