package conformance

import (
	"context"
	"iter"

	"github.com/agentry-dev/agentry/provider"
)

// minimalDriver declares only what every provider has: create and turns.
type minimalDriver struct{ *FakeDriver }

func (d minimalDriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	m, err := d.FakeDriver.Materialize(ctx, def)
	if err != nil {
		return m, err
	}
	m.Capabilities = provider.Capabilities{ProviderKey: FakeKey}
	in := m.Adapter.(*fakeInstance)
	m.Adapter = minimalAdapter{in}
	return m, nil
}

type minimalAdapter struct{ in *fakeInstance }

func (a minimalAdapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	s, err := a.in.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	return minimalSession{s.(*fakeSession)}, nil
}

// minimalSession hides the fake's interrupt and steer ports.
type minimalSession struct{ s *fakeSession }

func (m minimalSession) Binding() provider.Binding { return m.s.Binding() }
func (m minimalSession) RunTurn(ctx context.Context, req provider.TurnRequest) iterSeq {
	return m.s.RunTurn(ctx, req)
}
func (m minimalSession) Resolve(ctx context.Context, res provider.Resolution) iterSeq {
	return m.s.Resolve(ctx, res)
}
func (m minimalSession) Close(ctx context.Context, r provider.CloseReason) error {
	return m.s.Close(ctx, r)
}

type iterSeq = iter.Seq2[provider.Output, error]
