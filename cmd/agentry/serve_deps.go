package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
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
	d := serveDeps{model: m, close: func() {}}
	if o.events != "" {
		s, err := ndjson.Open(o.events, ndjson.Options{OnError: func(err error) {
			fmt.Fprintf(warn, "agentry serve: events file: %v\n", err)
		}})
		if err != nil {
			return serveDeps{}, usageError("--events: %v", err)
		}
		d.sinks = append(d.sinks, s)
	}
	_ = ctx
	return d, nil
}

// closeSinks closes sinks an agent never took over.
func closeSinks(sinks []event.Sink) {
	for _, s := range sinks {
		_ = s.Close(context.Background())
	}
}
