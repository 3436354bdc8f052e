package native

import (
	"context"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/provider"
)

// Open is the short way to one native instance: a registry holding a
// single definition (instance id "agentry") of a driver built from cfg,
// opened with opts. A host drives the instance; its owner disposes the
// registry (which shuts the agent down) when the host is done.
func Open(ctx context.Context, cfg Config, opts ...provider.Option) (*provider.Registry, *provider.Instance, error) {
	d, err := NewDriver(cfg)
	if err != nil {
		return nil, nil, err
	}
	return provider.OpenOne(ctx, d, InstanceID, opts...)
}

// InstanceID is the id of the instance Open makes.
const InstanceID = "agentry"

// Fixed returns a Config.Agent that gives every instance the same
// options: for a program that opens one instance.
func Fixed(opt agent.Options) func(context.Context, provider.Definition) (agent.Options, error) {
	return func(context.Context, provider.Definition) (agent.Options, error) { return opt, nil }
}
