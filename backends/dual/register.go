package dual

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// Register implements driver.Driver: it writes inst to both sides at once
// and succeeds when at least one side holds it.
func (d *pairDriver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	r := &registration{d: d, inst: inst.Clone(), ttl: ttl}
	errs := both(func(i int) error { return r.register(ctx, i) })
	if err := d.outcome("register", errs); err != nil {
		return nil, err
	}
	return r, nil
}

// registration holds one side's registration per side, nil for a side
// that does not hold the instance yet (down when registered, or lost it).
type registration struct {
	d    *pairDriver
	ttl  time.Duration
	mu   sync.Mutex // serializes operations; sides run in parallel within one
	inst driver.Instance
	regs [2]driver.Registration
}

// register writes r.inst to side i; r.mu held or r not yet shared.
func (r *registration) register(ctx context.Context, i int) error {
	reg, err := r.d.sides[i].Register(ctx, r.inst, r.ttl)
	if err != nil {
		return r.d.classify(ctx, i, err)
	}
	r.regs[i] = reg
	return nil
}

// Heartbeat renews both sides. A side that does not hold the instance
// (down when it was written, or ErrNotFound now while the other side
// renewed) is registered again, alone. When no side holds it any more the
// error wraps ErrNotFound, and the lease engine registers it again on both
// sides, reporting the re-registration as for any backend.
func (r *registration) Heartbeat(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := both(func(i int) error {
		if r.regs[i] == nil {
			return r.register(ctx, i)
		}
		return r.d.classify(ctx, i, r.regs[i].Heartbeat(ctx))
	})
	if errs[0] == nil || errs[1] == nil {
		errs = both(func(i int) error {
			if errors.Is(errs[i], driver.ErrNotFound) {
				r.regs[i] = nil
				return r.register(ctx, i)
			}
			return errs[i]
		})
	}
	return r.d.outcome("heartbeat", errs)
}

// Update replaces the instance on both sides; a side that does not hold
// it is registered with the new fields.
func (r *registration) Update(ctx context.Context, inst driver.Instance) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inst = inst.Clone()
	errs := both(func(i int) error {
		if r.regs[i] == nil {
			return r.register(ctx, i)
		}
		return r.d.classify(ctx, i, r.regs[i].Update(ctx, inst))
	})
	return r.d.outcome("update", errs)
}

// Deregister removes the instance from both sides. A side that cannot be
// reached is reported in the error; its record expires with the TTL.
func (r *registration) Deregister(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := both(func(i int) error {
		if r.regs[i] == nil {
			return nil
		}
		return r.d.classify(ctx, i, r.regs[i].Deregister(ctx))
	})
	for i, err := range errs {
		r.d.noteSide(i, "deregister", err)
	}
	return errors.Join(errs[0], errs[1])
}
