package registry

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry/driver"
)

// What a driver reads back was written by anyone with access to the
// backend: another tenant sharing it, an older or newer tool, a script, a
// corrupted write. checked wraps a driver so that every record it reads is
// checked once, here, for every backend: a record is served only when its
// service is the one asked for, its address is a valid host:port (read in
// its canonical form) that the address policy allows (no metadata,
// link-local, multicast or broadcast address; loopback only when allowed)
// and its fields are within the limits. Anything else
// is skipped and reported (a rate-limited slog warning), never served.
type checked struct {
	driver.Driver
	rep      *reporter
	loopback bool // loopback addresses are served (see AllowLoopback)
}

// reportEvery bounds the warnings about skipped records: one line per
// interval, with the count of those not reported since.
const reportEvery = 10 * time.Second

type reporter struct {
	log        *slog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (p *reporter) skipped(service string, in driver.Instance, err error) {
	p.mu.Lock()
	now := time.Now()
	if !p.last.IsZero() && now.Sub(p.last) < reportEvery {
		p.suppressed++
		p.mu.Unlock()
		return
	}
	n := p.suppressed
	p.last, p.suppressed = now, 0
	p.mu.Unlock()
	log := p.log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("roster: skipped a record read from the backend", "service", service, "id", in.ID,
		"reason", err.Error(), "skipped_unreported", n)
}

// checkRecord returns in as served (its address canonical) or an error.
// Loopback addresses pass only when loopback is allowed.
func checkRecord(service string, in driver.Instance, loopback bool) (driver.Instance, error) {
	if in.Service != service {
		return in, backend.Invalid("service", "record of %q listed under %q", in.Service, service)
	}
	addr, err := backend.CanonicalAddress(in.Address)
	if err != nil {
		return in, err
	}
	in.Address = addr
	if err := backend.ValidateFields(in); err != nil {
		return in, err
	}
	return in, checkLoopback(in, loopback)
}

// checkLoopback applies the loopback rule to the primary address and to
// every endpoint's.
func checkLoopback(in driver.Instance, allowed bool) error {
	if allowed {
		return nil
	}
	if err := backend.CheckLoopback("address", in.Address, false); err != nil {
		return err
	}
	for n, e := range in.Endpoints {
		if err := backend.CheckLoopback("endpoints["+strconv.Itoa(n)+"].address", e.Address, false); err != nil {
			return err
		}
	}
	return nil
}

// CheckSnapshot holds a snapshot from elsewhere — a file, another
// process — to what the registry serves from a backend: every instance
// of s.Service, valid, its address in canonical form, its ID its own. It
// returns the first failure, naming the instance's place in the list.
func CheckSnapshot(s Snapshot) error {
	ids := make(map[string]bool, len(s.Instances))
	for i, in := range s.Instances {
		ok, err := checkRecord(s.Service, in, true)
		switch {
		case err == nil && ok.Address != in.Address:
			err = backend.Invalid("address", "%q is not in canonical form %q", in.Address, ok.Address)
		case err == nil && ids[in.ID]:
			err = backend.Invalid("id", "%q listed twice", in.ID)
		}
		if err != nil {
			return fmt.Errorf("instance %d: %w", i, err)
		}
		ids[in.ID] = true
	}
	return nil
}

// filter returns s with the records that fail checkRecord, or repeat an
// ID, left out. It copies the instances only when one changes.
func (c checked) filter(service string, s Snapshot) Snapshot {
	byID := func(a, b Instance) int { return strings.Compare(a.ID, b.ID) }
	if !slices.IsSortedFunc(s.Instances, byID) {
		// Drivers return any order; Snapshot promises order by ID. The
		// slice may be the driver's own: sort a copy.
		s.Instances = slices.Clone(s.Instances)
		slices.SortStableFunc(s.Instances, byID)
	}
	var out []Instance // nil while every record so far is served as read
	for i, in := range s.Instances {
		ok, err := checkRecord(service, in, c.loopback)
		if err == nil && i > 0 && in.ID == s.Instances[i-1].ID {
			err = backend.Invalid("id", "%q listed twice", in.ID)
		}
		if err != nil {
			c.rep.skipped(service, in, err)
			if out == nil {
				out = slices.Clone(s.Instances[:i])
			}
			continue
		}
		if out != nil || ok.Address != in.Address {
			if out == nil {
				out = slices.Clone(s.Instances[:i])
			}
			out = append(out, ok)
		}
	}
	if out != nil {
		s.Instances = out
	}
	return s
}

func (c checked) List(ctx context.Context, service string) (Snapshot, error) {
	s, err := c.Driver.List(ctx, service)
	if err != nil {
		return s, err
	}
	return c.filter(service, s), nil
}

func (c checked) Watch(ctx context.Context, service string) (driver.Stream, error) {
	st, err := c.Driver.Watch(ctx, service)
	if err != nil {
		return nil, err
	}
	return checkedStream{Stream: st, c: c, service: service}, nil
}

// Services leaves out names that are not valid service names.
func (c checked) Services(ctx context.Context) ([]string, error) {
	names, err := c.Driver.Services(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(names, func(n string) bool {
		if err := backend.ValidateService(n); err != nil {
			c.rep.skipped(n, driver.Instance{}, err)
			return true
		}
		return false
	}), nil
}

type checkedStream struct {
	driver.Stream
	c       checked
	service string
}

func (st checkedStream) Next(ctx context.Context) (Snapshot, error) {
	s, err := st.Stream.Next(ctx)
	if err != nil {
		return s, err
	}
	return st.c.filter(st.service, s), nil
}
