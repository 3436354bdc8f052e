package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/agentry-dev/agentry/provider/conformance"
	"slices"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

// tdriver builds tprov instances and logs what it does.
type tdriver struct {
	key      string
	multi    bool
	log      *eventLog
	failOn   string                                // instance id whose materialisation fails
	caps     func(id string) provider.Capabilities // nil: fullCaps with the key
	disposeE func(id string, n int) error
	ready    provider.Readiness

	mu       sync.Mutex
	disposes map[string]int
}

type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *eventLog) add(s string) {
	l.mu.Lock()
	l.evs = append(l.evs, s)
	l.mu.Unlock()
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.evs...)
}

func (d *tdriver) ProviderKey() string             { return d.key }
func (d *tdriver) SupportsMultipleInstances() bool { return d.multi }

func (d *tdriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	d.log.add("build " + def.ID)
	if def.ID == d.failOn {
		return provider.Materialized{}, errors.New("the executable is missing")
	}
	p := newTprov()
	p.caps.ProviderKey = d.key
	adapter := p.adapter() // every port of fullCaps
	if d.caps != nil {
		p.caps = d.caps(def.ID) // what the driver declares
	}
	return provider.Materialized{
		Capabilities: p.caps,
		Adapter:      adapter,
		Readiness: func(context.Context) (provider.Readiness, error) {
			if d.ready != "" {
				return d.ready, nil
			}
			return provider.Ready, nil
		},
		Dispose: func(ctx context.Context) error {
			d.mu.Lock()
			if d.disposes == nil {
				d.disposes = map[string]int{}
			}
			d.disposes[def.ID]++
			n := d.disposes[def.ID]
			d.mu.Unlock()
			d.log.add("dispose " + def.ID)
			if d.disposeE != nil {
				return d.disposeE(def.ID, n)
			}
			return nil
		},
	}, nil
}

func defs(key string, ids ...string) []provider.Definition {
	var out []provider.Definition
	for _, id := range ids {
		out = append(out, provider.Definition{ID: id, Provider: key})
	}
	return out
}

func TestRegistryRefusesBeforeMaterialising(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	log := &eventLog{}
	a := &tdriver{key: "alpha", log: log}
	b := &tdriver{key: "beta", multi: true, log: log}
	for _, tc := range []struct {
		name    string
		drivers []provider.Driver
		defs    []provider.Definition
		code    provider.Code
	}{
		{"nil driver", []provider.Driver{a, nil}, nil, provider.CodeInvalidDriver},
		{"bad key", []provider.Driver{&tdriver{key: "Alpha", log: log}}, nil, provider.CodeInvalidDriver},
		{"duplicate provider", []provider.Driver{a, &tdriver{key: "alpha", log: log}}, nil, provider.CodeDuplicateProvider},
		{"duplicate instance", []provider.Driver{a, b}, append(defs("beta", "x", "y"), defs("alpha", "x")...), provider.CodeDuplicateInstance},
		{"unregistered", []provider.Driver{a}, append(defs("alpha", "x"), defs("gamma", "y")...), provider.CodeProviderNotRegistered},
		{"one instance only", []provider.Driver{a, b}, append(defs("alpha", "x"), defs("alpha", "y")...), provider.CodeMultipleInstancesUnsupported},
		{"bad instance id", []provider.Driver{a}, defs("alpha", "x", ""), provider.CodeInvalidInput},
		{"bad config", []provider.Driver{a}, []provider.Definition{{ID: "x", Provider: "alpha", Config: json.RawMessage(`"s"`)}}, provider.CodeInvalidInput},
	} {
		_, err := provider.OpenRegistry(ctx, tc.drivers, tc.defs)
		if !provider.HasCode(err, tc.code) {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.code)
		}
		sawCode(tc.code)
	}
	if got := log.list(); len(got) != 0 {
		t.Fatalf("materialised before every definition was checked: %v", got)
	}
}

func TestRegistryMaterialisesInOrderAndDisposesInReverse(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	log := &eventLog{}
	d := &tdriver{key: "alpha", multi: true, log: log}
	r, err := provider.OpenRegistry(ctx, []provider.Driver{d}, defs("alpha", "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if got := log.list(); !slices.Equal(got, []string{"build a", "build b", "build c"}) {
		t.Fatalf("order %v", got)
	}
	var ids []string
	for _, inst := range r.Instances() {
		ids = append(ids, inst.ID())
	}
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Fatalf("instances %v", ids)
	}
	inst, err := r.Instance("b")
	if err != nil || inst.ProviderKey() != "alpha" || !inst.Capabilities().Sessions.Resume {
		t.Fatalf("%v, %v", inst, err)
	}
	if rd, err := inst.Readiness(ctx); err != nil || rd != provider.Ready {
		t.Fatalf("readiness %v, %v", rd, err)
	}
	s, err := inst.Adapter().Create(ctx, createReq("s"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close(ctx, "")
	_, err = r.Instance("zzz")
	wantCode(t, err, provider.CodeInstanceNotFound)

	// Disposing one instance: lookups, openings and readiness refuse it.
	if err := inst.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = r.Instance("b")
	wantCode(t, err, provider.CodeInstanceDisposed)
	_, err = inst.Adapter().Create(ctx, createReq("s2"))
	wantCode(t, err, provider.CodeInstanceDisposed)
	_, err = inst.Readiness(ctx)
	wantCode(t, err, provider.CodeInstanceDisposed)
	if len(r.Instances()) != 2 {
		t.Fatal("a disposed instance is still listed")
	}

	if err := r.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"build a", "build b", "build c", "dispose b", "dispose c", "dispose a"}
	if got := log.list(); !slices.Equal(got, want) {
		t.Fatalf("log %v; want %v", got, want)
	}
	_, err = r.Instance("a")
	wantCode(t, err, provider.CodeRegistryDisposed)
	if r.Instances() != nil {
		t.Fatal("a disposed registry lists instances")
	}
}

func TestRegistryOpeningFailureUnwinds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	log := &eventLog{}
	d := &tdriver{key: "alpha", multi: true, log: log, failOn: "c"}
	_, err := provider.OpenRegistry(ctx, []provider.Driver{d}, defs("alpha", "a", "b", "c", "d"))
	var oe *provider.OperationError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %v", err)
	}
	want := []string{"build a", "build b", "build c", "dispose b", "dispose a"}
	if got := log.list(); !slices.Equal(got, want) {
		t.Fatalf("log %v; want %v", got, want)
	}

	// A refused instance (its capabilities name another provider) was
	// built, so it is disposed too; and when disposals fail, the error
	// lists them and RetryCleanup finishes the job.
	log2 := &eventLog{}
	d2 := &tdriver{key: "alpha", multi: true, log: log2,
		caps: func(id string) provider.Capabilities {
			c := fullCaps()
			c.ProviderKey = "alpha"
			if id == "c" {
				c.ProviderKey = "other"
			}
			return c
		},
		disposeE: func(id string, n int) error {
			if id == "a" && n == 1 {
				return errors.New("a is stuck")
			}
			return nil
		}}
	_, err = provider.OpenRegistry(ctx, []provider.Driver{d2}, defs("alpha", "a", "b", "c"))
	wantCode(t, err, provider.CodeInvalidDriver)
	wantCode(t, err, provider.CodeInstanceCleanupFailed)
	var ce *provider.CleanupError
	var cf *provider.ContractError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v; want a *CleanupError", err)
	}
	for _, e := range ce.Errs {
		if errors.As(e, &cf) && cf.Code == provider.CodeInstanceCleanupFailed {
			break
		}
	}
	if !slices.Equal(cf.Instances, []string{"a"}) {
		t.Fatalf("failed ids %v; want [a]", cf.Instances)
	}
	if err := ce.RetryCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	want = []string{"build a", "build b", "build c", "dispose c", "dispose b", "dispose a", "dispose a"}
	if got := log2.list(); !slices.Equal(got, want) {
		t.Fatalf("log %v; want %v", got, want)
	}

	// Capabilities the adapter does not match are refused the same way.
	log3 := &eventLog{}
	d3 := &tdriver{key: "alpha", multi: true, log: log3, caps: func(string) provider.Capabilities {
		return provider.Capabilities{ProviderKey: "alpha"} // but the adapter resumes and branches
	}}
	_, err = provider.OpenRegistry(ctx, []provider.Driver{d3}, defs("alpha", "a"))
	wantCode(t, err, provider.CodeCapabilityPortMismatch)
	if got := log3.list(); !slices.Equal(got, []string{"build a", "dispose a"}) {
		t.Fatalf("log %v", got)
	}
}

func TestRegistryDisposeCollectsAndRetries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	log := &eventLog{}
	d := &tdriver{key: "alpha", multi: true, log: log, disposeE: func(id string, n int) error {
		if (id == "a" || id == "c") && n == 1 {
			return errors.New(id + " is stuck")
		}
		return nil
	}}
	r, err := provider.OpenRegistry(ctx, []provider.Driver{d}, defs("alpha", "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Dispose(ctx)
	wantCode(t, err, provider.CodeInstanceCleanupFailed)
	var cf *provider.ContractError
	errors.As(err, &cf)
	if !slices.Equal(cf.Instances, []string{"c", "a"}) {
		t.Fatalf("failed %v; want [c a]", cf.Instances)
	}
	_, err = r.Instance("b")
	wantCode(t, err, provider.CodeRegistryDisposed)

	// Retries only the failed ones; concurrent retries share an attempt.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := r.Dispose(ctx); err != nil {
				t.Errorf("retry: %v", err)
			}
		})
	}
	wg.Wait()
	want := []string{"build a", "build b", "build c", "dispose c", "dispose b", "dispose a", "dispose c", "dispose a"}
	if got := log.list(); !slices.Equal(got, want) {
		t.Fatalf("log %v; want %v", got, want)
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, rd := range []provider.Readiness{provider.Ready, provider.MissingExecutable, provider.MissingCredentials, provider.UnsupportedVersion, provider.Unavailable} {
		if !rd.Valid() {
			t.Errorf("%s is not valid", rd)
		}
		d := &tdriver{key: "alpha", log: &eventLog{}, ready: rd}
		r, err := provider.OpenRegistry(ctx, []provider.Driver{d}, defs("alpha", "a"))
		if err != nil {
			t.Fatal(err)
		}
		inst, _ := r.Instance("a")
		if got, err := inst.Readiness(ctx); err != nil || got != rd {
			t.Errorf("readiness %v, %v; want %v", got, err, rd)
		}
		r.Dispose(ctx)
	}
	d := &tdriver{key: "alpha", log: &eventLog{}, ready: "almost"}
	r, _ := provider.OpenRegistry(ctx, []provider.Driver{d}, defs("alpha", "a"))
	inst, _ := r.Instance("a")
	_, err := inst.Readiness(ctx)
	wantCode(t, err, provider.CodeInvalidDriver)
	r.Dispose(ctx)
}

func TestRetryCleanupRunsAtMostOnceAndShares(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var calls int
	var mu sync.Mutex
	log := &eventLog{}
	d := &tdriver{key: "alpha", log: log, disposeE: func(id string, n int) error {
		mu.Lock()
		calls = n
		mu.Unlock()
		if n == 1 {
			return errors.New("stuck")
		}
		entered <- struct{}{}
		<-gate
		return nil
	}}
	r, err := provider.OpenRegistry(ctx, []provider.Driver{d}, append(defs("alpha", "a"), provider.Definition{ID: "b", Provider: "nope"}))
	if err == nil || r != nil {
		t.Fatal("opened")
	}
	// The second definition names no driver: nothing was built.
	r, err = provider.OpenRegistry(ctx, []provider.Driver{d, &tdriver{key: "beta", log: log, failOn: "b"}},
		append(defs("alpha", "a"), defs("beta", "b")...))
	var ce *provider.CleanupError
	if !errors.As(err, &ce) || r != nil {
		t.Fatalf("err = %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	wg.Go(func() { errs[0] = ce.RetryCleanup(ctx) })
	<-entered
	for i := 1; i < len(errs); i++ {
		wg.Go(func() { errs[i] = ce.RetryCleanup(ctx) })
	}
	close(gate)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := ce.RetryCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("dispose ran %d times; want 2 (the failure, one shared retry)", calls)
	}
}

// OpenOne opens the one instance of one driver, and refuses none.
func TestOpenOne(t *testing.T) {
	ctx := context.Background()
	if _, _, err := provider.OpenOne(ctx, nil, "x"); err == nil {
		t.Fatal("OpenOne took a nil driver")
	}
	d := conformance.NewFakeDriver()
	reg, inst, err := provider.OpenOne(ctx, d, "only")
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID() != "only" || inst.ProviderKey() != d.ProviderKey() || len(reg.Instances()) != 1 {
		t.Fatalf("instance %q of %q, %d in the registry", inst.ID(), inst.ProviderKey(), len(reg.Instances()))
	}
	if err := reg.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Instance("only"); err == nil {
		t.Fatal("a disposed registry still hands out its instance")
	}
}
