package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Driver builds instances of one provider. Drivers are registered once per
// provider key.
type Driver interface {
	// ProviderKey names the provider this driver builds.
	ProviderKey() string
	// SupportsMultipleInstances is false when one process can hold only one
	// instance of this provider.
	SupportsMultipleInstances() bool
	// Materialize builds the instance def describes. It is called only
	// after every definition passed to the registry was checked.
	Materialize(ctx context.Context, def Definition) (Materialized, error)
}

// Definition is one instance a host wants.
type Definition struct {
	// ID names the instance (an opaque id), unique in the registry.
	ID string
	// Provider is the provider key of the driver to build it with.
	Provider string
	// Config is opaque to the registry: empty or a JSON object.
	Config json.RawMessage
}

// Materialized is what a driver built.
type Materialized struct {
	Capabilities Capabilities
	// Adapter is validated against Capabilities by the registry.
	Adapter Adapter
	// Readiness reports whether the instance can serve now (nil: always
	// ready).
	Readiness func(ctx context.Context) (Readiness, error)
	// Dispose frees what the instance holds (nil: nothing). It may be
	// called again after it fails.
	Dispose func(ctx context.Context) error
}

// Readiness says whether an instance can serve.
type Readiness string

const (
	Ready              Readiness = "ready"
	MissingExecutable  Readiness = "missing_executable"
	MissingCredentials Readiness = "missing_credentials"
	UnsupportedVersion Readiness = "unsupported_version"
	Unavailable        Readiness = "unavailable"
)

// Valid reports whether r is one of the readiness values.
func (r Readiness) Valid() bool {
	switch r {
	case Ready, MissingExecutable, MissingCredentials, UnsupportedVersion, Unavailable:
		return true
	}
	return false
}

// Instance is one materialised provider.
type Instance struct {
	id        string
	caps      Capabilities
	adapter   *Validated
	readiness func(ctx context.Context) (Readiness, error)
	dispose   *retrier

	mu       sync.Mutex
	disposed bool
}

// ID returns the instance's id.
func (i *Instance) ID() string { return i.id }

// ProviderKey returns the provider's key.
func (i *Instance) ProviderKey() string { return i.caps.ProviderKey }

// Capabilities returns the instance's normalised capabilities.
func (i *Instance) Capabilities() Capabilities { return i.caps }

// Adapter returns the instance's validated adapter. Once the instance is
// disposed every opening through it is refused (instance_disposed).
func (i *Instance) Adapter() *Validated { return i.adapter }

// Readiness asks the driver whether the instance can serve now.
func (i *Instance) Readiness(ctx context.Context) (Readiness, error) {
	if err := i.gate(); err != nil {
		return "", err
	}
	if i.readiness == nil {
		return Ready, nil
	}
	var r Readiness
	err := safely("the driver's readiness", func() error {
		var err error
		r, err = i.readiness(ctx)
		return err
	})
	if err != nil {
		return "", &OperationError{Provider: i.caps.ProviderKey, Op: "readiness", Err: err}
	}
	if !r.Valid() {
		return "", violation(i.caps.ProviderKey, CodeInvalidDriver, "readiness returned a value that is not a readiness")
	}
	return r, nil
}

func (i *Instance) gate() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.disposed {
		return &ContractError{Provider: i.caps.ProviderKey, Code: CodeInstanceDisposed, Message: "the instance is disposed", Instances: []string{i.id}}
	}
	return nil
}

// Dispose frees the instance. It is idempotent and retryable; concurrent
// calls share one attempt. From the first call on, the instance refuses
// new sessions and lookups.
func (i *Instance) Dispose(ctx context.Context) error {
	i.mu.Lock()
	i.disposed = true
	i.mu.Unlock()
	return i.dispose.do(ctx)
}

// Registry holds the instances a host materialised from its definitions.
// Safe for concurrent use.
type Registry struct {
	instances []*Instance
	byID      map[string]*Instance
	dispose   *retrier

	mu       sync.Mutex
	disposed bool
}

// OpenRegistry checks the drivers and every definition before it
// materialises any, then materialises the definitions in order. When one
// fails, those already built are disposed in reverse order; if any of
// those disposals fails too, the error is a *CleanupError listing their
// ids (RetryCleanup retries them). opts are passed to [Validate] for every
// instance (WithInstance is set to the definition's id).
func OpenRegistry(ctx context.Context, drivers []Driver, defs []Definition, opts ...Option) (*Registry, error) {
	byKey := make(map[string]Driver, len(drivers))
	for i, d := range drivers {
		if isNil(d) {
			return nil, violation("", CodeInvalidDriver, "driver %d is nil", i)
		}
		key := d.ProviderKey()
		if err := CheckProviderKey(key); err != nil {
			return nil, &ContractError{Code: CodeInvalidDriver, Message: fmt.Sprintf("driver %d has a malformed provider key", i), Err: err}
		}
		if _, dup := byKey[key]; dup {
			return nil, violation(key, CodeDuplicateProvider, "two drivers are registered for the provider")
		}
		byKey[key] = d
	}
	ids := make(map[string]bool, len(defs))
	perKey := make(map[string]int)
	for i, def := range defs {
		if err := CheckID(def.ID); err != nil {
			return nil, &ContractError{Code: CodeInvalidInput, Message: fmt.Sprintf("definition %d has a malformed instance id", i), Err: err}
		}
		if ids[def.ID] {
			return nil, &ContractError{Code: CodeDuplicateInstance, Message: "two definitions share an instance id", Instances: []string{def.ID}}
		}
		ids[def.ID] = true
		d, ok := byKey[def.Provider]
		if !ok {
			return nil, &ContractError{Code: CodeProviderNotRegistered, Message: "a definition names a provider with no driver", Instances: []string{def.ID}}
		}
		perKey[def.Provider]++
		if perKey[def.Provider] > 1 && !d.SupportsMultipleInstances() {
			return nil, &ContractError{Provider: def.Provider, Code: CodeMultipleInstancesUnsupported, Message: "the provider supports one instance", Instances: []string{def.ID}}
		}
		if err := CheckConfiguration(def.Config); err != nil {
			return nil, &ContractError{Provider: def.Provider, Code: CodeInvalidInput, Message: "a definition's configuration is unusable", Instances: []string{def.ID}, Err: err}
		}
	}

	r := &Registry{byID: make(map[string]*Instance, len(defs))}
	r.dispose = newRetrier(r.doDispose)
	for _, def := range defs {
		inst, err := materialize(ctx, byKey[def.Provider], def, opts)
		if inst != nil {
			// Built, so it must be disposed, even when it was refused.
			r.instances = append(r.instances, inst)
		}
		if err != nil {
			return nil, r.unwind(ctx, err)
		}
		r.byID[def.ID] = inst
	}
	return r, nil
}

// materialize builds one instance. It returns the instance whenever the
// driver built something, even with an error, so the caller disposes it.
func materialize(ctx context.Context, d Driver, def Definition, opts []Option) (*Instance, error) {
	key := d.ProviderKey()
	var m Materialized
	err := safely("the driver's Materialize", func() error {
		var err error
		m, err = d.Materialize(ctx, Definition{ID: def.ID, Provider: def.Provider, Config: clone(def.Config)})
		return err
	})
	if err != nil {
		return nil, &OperationError{Provider: key, Op: "materialize " + def.ID, Err: err}
	}
	inst := &Instance{id: def.ID, caps: Capabilities{ProviderKey: key}, readiness: m.Readiness}
	dispose := m.Dispose
	inst.dispose = newRetrier(func(ctx context.Context) error {
		if dispose == nil {
			return nil
		}
		return dispose(ctx)
	})
	if m.Capabilities.ProviderKey != key {
		return inst, violation(key, CodeInvalidDriver, "instance %s declares another provider key", def.ID)
	}
	vopts := append(append([]Option{}, opts...), WithInstance(def.ID), withGate(inst.gate))
	v, err := Validate(m.Capabilities, m.Adapter, vopts...)
	if err != nil {
		return inst, err
	}
	inst.caps, inst.adapter = v.Capabilities(), v
	return inst, nil
}

// unwind disposes what was built, newest first, after a failed opening.
func (r *Registry) unwind(ctx context.Context, cause error) error {
	r.mu.Lock()
	r.disposed = true
	r.mu.Unlock()
	err := r.dispose.do(ctx)
	if err == nil {
		return cause
	}
	return &CleanupError{Errs: flatten(cause, err), retry: r.dispose}
}

// doDispose disposes every instance, newest first, and names those that
// failed.
func (r *Registry) doDispose(ctx context.Context) error {
	var failed []string
	var causes errList
	for i := len(r.instances) - 1; i >= 0; i-- {
		inst := r.instances[i]
		if err := inst.Dispose(ctx); err != nil {
			failed = append(failed, inst.id)
			causes = append(causes, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &ContractError{Code: CodeInstanceCleanupFailed, Message: "disposing some instances failed", Instances: failed, Err: causes}
}

// Instance looks up an instance by id.
func (r *Registry) Instance(id string) (*Instance, error) {
	r.mu.Lock()
	disposed := r.disposed
	r.mu.Unlock()
	if disposed {
		return nil, violation("", CodeRegistryDisposed, "the registry is disposed")
	}
	inst, ok := r.byID[id]
	if !ok {
		return nil, violation("", CodeInstanceNotFound, "no instance has that id")
	}
	if err := inst.gate(); err != nil {
		return nil, err
	}
	return inst, nil
}

// Instances lists the instances not yet disposed, in definition order.
func (r *Registry) Instances() []*Instance {
	r.mu.Lock()
	disposed := r.disposed
	r.mu.Unlock()
	if disposed {
		return nil
	}
	var out []*Instance
	for _, inst := range r.instances {
		if inst.gate() == nil {
			out = append(out, inst)
		}
	}
	return out
}

// Dispose disposes every instance in reverse definition order. Failures
// are collected into one *ContractError (instance_cleanup_failed) listing
// the ids; calling Dispose again retries only those. It is idempotent;
// concurrent calls share one attempt. Lookups are refused from the first
// call on.
func (r *Registry) Dispose(ctx context.Context) error {
	r.mu.Lock()
	r.disposed = true
	r.mu.Unlock()
	return r.dispose.do(ctx)
}

// OpenOne is OpenRegistry for a program that runs one instance of one
// driver: a registry holding the single definition {ID: id, Provider:
// d.ProviderKey()}, and that instance. Disposing the registry disposes the
// instance.
func OpenOne(ctx context.Context, d Driver, id string, opts ...Option) (*Registry, *Instance, error) {
	if d == nil {
		return nil, nil, errors.New("provider: OpenOne: the driver is nil")
	}
	reg, err := OpenRegistry(ctx, []Driver{d}, []Definition{{ID: id, Provider: d.ProviderKey()}}, opts...)
	if err != nil {
		return nil, nil, err
	}
	inst, err := reg.Instance(id)
	if err != nil {
		_ = reg.Dispose(ctx)
		return nil, nil, err
	}
	return reg, inst, nil
}
