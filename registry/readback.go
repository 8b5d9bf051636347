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
// ID, left out.
func (c checked) filter(service string, s Snapshot) Snapshot {
	return serve(s, func(in Instance, dup bool) (string, error) {
		ok, err := checkRecord(service, in, c.loopback)
		if err == nil && dup {
			err = backend.Invalid("id", "%q listed twice", in.ID)
		}
		if err != nil {
			c.rep.skipped(service, in, err)
		}
		return ok.Address, err
	})
}

// serve returns s in order of ID, each record at the address check
// returns, or left out when check fails it. dup is set for a record
// whose ID the one before it has. It copies the instances only when one
// changes.
func serve(s Snapshot, check func(in Instance, dup bool) (string, error)) Snapshot {
	s.Instances = sortedByID(s.Instances)
	var out []Instance // nil while every record so far is served as read
	for i, in := range s.Instances {
		addr, err := check(in, i > 0 && in.ID == s.Instances[i-1].ID)
		if out == nil && (err != nil || addr != in.Address) {
			out = slices.Clone(s.Instances[:i])
		}
		if err == nil && out != nil {
			in.Address = addr
			out = append(out, in)
		}
	}
	if out != nil {
		s.Instances = out
	}
	return s
}

// sortedByID returns ins in order of ID. Drivers return any order and
// Snapshot promises order by ID. The slice may be the driver's own, so it
// sorts a copy.
func sortedByID(ins []Instance) []Instance {
	byID := func(a, b Instance) int { return strings.Compare(a.ID, b.ID) }
	if slices.IsSortedFunc(ins, byID) {
		return ins
	}
	ins = slices.Clone(ins)
	slices.SortStableFunc(ins, byID)
	return ins
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
	return &checkedStream{Stream: st, c: c, service: service}, nil
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

// checkedStream checks only the records that changed since its previous
// snapshot. A watch rereads every record on every change, and checking
// all of them was most of a watcher's cost at 1,000 instances. A record
// Equal to the one read last time under its ID gets the same verdict: the
// check depends on the record and the fixed address policy alone. A
// record still bad and unchanged is not reported again; the resync's List
// reports it (a full check) and so does a new stream. Next is called by
// one goroutine at a time, as Registry does.
type checkedStream struct {
	driver.Stream
	c       checked
	service string
	prev    []verdict // last snapshot's records, sorted by ID, one per ID
	next    []verdict // spare buffer, swapped with prev after each Next
}

// verdict is the check of one raw record: the canonical address it is
// served at, or why it is skipped.
type verdict struct {
	raw  Instance
	addr string
	err  error
}

func (st *checkedStream) Next(ctx context.Context) (Snapshot, error) {
	s, err := st.Stream.Next(ctx)
	if err != nil {
		return s, err
	}
	return st.filter(s), nil
}

// filter serves what checked.filter would, with the verdicts of records
// unchanged since the previous snapshot reused.
func (st *checkedStream) filter(s Snapshot) Snapshot {
	next, j := st.next[:0], 0
	s = serve(s, func(in Instance, dup bool) (string, error) {
		if dup {
			err := backend.Invalid("id", "%q listed twice", in.ID)
			st.c.rep.skipped(st.service, in, err)
			return "", err
		}
		var v verdict
		v, j = st.check(in, j)
		next = append(next, v)
		return v.addr, v.err
	})
	// The spare buffer keeps no driver data while unused.
	clear(st.prev)
	st.prev, st.next = next, st.prev[:0]
	return s
}

// check returns the verdict on in and where in prev it searched to. The
// verdict is prev's when in is unchanged; prev[:j] hold lower IDs.
func (st *checkedStream) check(in Instance, j int) (verdict, int) {
	for j < len(st.prev) && st.prev[j].raw.ID < in.ID {
		j++
	}
	if j < len(st.prev) && st.prev[j].raw.Equal(in) {
		return st.prev[j], j
	}
	ok, err := checkRecord(st.service, in, st.c.loopback)
	if err != nil {
		st.c.rep.skipped(st.service, in, err)
	}
	return verdict{raw: in, addr: ok.Address, err: err}, j
}
