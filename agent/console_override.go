package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/roster-go/roster/registry"
)

// overrideActioner acts on any instance of the registry through the
// operators' overrides the registry stores (registry.SetOverride): every
// reader applies them, and the owner's heartbeats do not undo them. On a
// backend that keeps no records it falls back to the agent's own leases.
type overrideActioner struct {
	a     *Agent
	local localActioner
}

// reason is what the registry records as the reason of an override.
const reason = "roster agent console"

func (o overrideActioner) set(ctx context.Context, ov registry.Override) error {
	ov.Reason = reason
	return o.a.reg.SetOverride(ctx, ov)
}

func (o overrideActioner) drain(ctx context.Context, service, id string) (string, error) {
	err := o.set(ctx, registry.Override{Service: service, ID: id, Drain: true})
	if errors.Is(err, errors.ErrUnsupported) {
		return o.local.drain(ctx, service, id)
	}
	return "drained: every reader sees weight 0 until restore", err
}

func (o overrideActioner) weight(ctx context.Context, service, id string, w uint32) (string, error) {
	n := int(w)
	err := o.set(ctx, registry.Override{Service: service, ID: id, Weight: &n})
	if errors.Is(err, errors.ErrUnsupported) {
		return o.local.weight(ctx, service, id, w)
	}
	return fmt.Sprintf("weight %d for every reader until restore", w), err
}

func (o overrideActioner) maint(ctx context.Context, service, id string) (string, error) {
	err := o.set(ctx, registry.Override{Service: service, ID: id, Maintenance: true})
	if errors.Is(err, errors.ErrUnsupported) {
		return o.local.maint(ctx, service, id)
	}
	return "in maintenance: left out of every list until restore", err
}

func (o overrideActioner) restore(ctx context.Context, service, id string) (string, error) {
	err := o.a.reg.ClearOverride(ctx, service, id)
	if errors.Is(err, errors.ErrUnsupported) {
		return o.local.restore(ctx, service, id)
	}
	return "override cleared: serves as its owner registered it", err
}

func (o overrideActioner) deregister(ctx context.Context, service, id string) (string, error) {
	err := o.a.reg.Deregister(ctx, registry.Override{Service: service, ID: id, Reason: reason})
	if errors.Is(err, errors.ErrUnsupported) {
		return o.local.deregister(ctx, service, id)
	}
	if err != nil {
		return "", err
	}
	// The agent's own lease of it would heartbeat in vain: end it.
	o.a.mu.Lock()
	lc := o.a.locals[id]
	if lc != nil && lc.lease.Instance().Service == service {
		delete(o.a.locals, id)
	} else {
		lc = nil
	}
	o.a.mu.Unlock()
	if lc != nil {
		lc.lease.Abandon()
	}
	return "deregistered: its records removed, held out by an override until restore", nil
}

// overridesOf returns the overrides of one service from all of them.
func overridesOf(all []registry.Override, service string) []registry.Override {
	var out []registry.Override
	for _, o := range all {
		if o.Service == service {
			out = append(out, o)
		}
	}
	return out
}

// applyOverrideInfo sets each instance's override (by ID first, then by
// address, as readers apply them) and returns the overrides that match
// no instance of the list: those holding instances out of it.
func applyOverrideInfo(ins []instanceState, ovs []registry.Override) []registry.Override {
	used := make([]bool, len(ovs))
	for i := range ins {
		byAddr := -1
		for n, o := range ovs {
			if o.ID != "" && o.ID == ins[i].ID {
				byAddr = n
				break
			}
			if o.Address != "" && o.Address == ins[i].Address && byAddr < 0 {
				byAddr = n
			}
		}
		if byAddr >= 0 {
			o := ovs[byAddr]
			ins[i].Override = &o
			used[byAddr] = true
		}
	}
	var held []registry.Override
	for n, o := range ovs {
		if !used[n] {
			held = append(held, o)
		}
	}
	return held
}

// sameOverride compares two overrides field by field.
func sameOverride(x, y registry.Override) bool {
	return x.Service == y.Service && x.ID == y.ID && x.Address == y.Address &&
		(x.Weight == nil) == (y.Weight == nil) && (x.Weight == nil || *x.Weight == *y.Weight) &&
		x.Drain == y.Drain && x.Maintenance == y.Maintenance && x.Deregistered == y.Deregistered &&
		x.By == y.By && x.Reason == y.Reason && x.At.Equal(y.At)
}
