package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// openDurable connects to the Temporal server at o.temporal and opens the
// durable provider: every turn a workflow, tool calls pinned to this
// replica's task queue, the agent events of what this replica does for
// them to events. The returned close stops the workers' client.
func openDurable(ctx context.Context, o serveOptions, st *sqlstore.Store, model llm.Model, tools []tool.Tool, events func(event.Event), stderr io.Writer, opts ...provider.Option) (*provider.Registry, *provider.Instance, func(), error) {
	replica := o.temporalReplica
	if replica == "" {
		replica = defaultReplicaName(o.addr)
	}
	c, err := client.Dial(client.Options{
		HostPort:  o.temporal,
		Namespace: o.temporalNamespace,
		Logger:    tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--temporal %s: connecting to the Temporal server: %w", o.temporal, err)
	}
	reg, inst, err := durable.Open(ctx, durable.Config{
		Client: c, TaskQueue: o.temporalQueue, Replica: replica, Model: model, Tools: tools, Store: native.HostStore(st),
		TeardownTimeout: o.teardown, MaxLiveSessions: o.maxLive, Events: events,
	}, opts...)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	return reg, inst, c.Close, nil
}

// defaultReplicaName names this replica after the machine and the port
// it listens on, which stay the same when it restarts.
func defaultReplicaName(addr string) string {
	h, _ := os.Hostname()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		port = addr
	}
	return h + "-" + port
}
