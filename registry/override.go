package registry

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// Override is an operator's action on one instance, stored in the
// registry's record store (see Records) at "override/<service>/<id>" so
// that it outlives every process. Every reader applies it: Lookup and
// Watch snapshots show a drained instance at weight 0, a weighted one at
// Weight, and leave an instance in maintenance out. The owner's lease
// keeps heartbeating, but nothing it writes undoes an override: readers
// apply the override over whatever the owner wrote, until ClearOverride.
//
// An override names its instance by ID, which is new at every restart of
// the owner, or by Address, which survives restarts: set exactly one. An
// override by ID wins over one by address on the same instance.
type Override struct {
	Service string `json:"service"`
	ID      string `json:"id,omitempty"`
	Address string `json:"address,omitempty"`

	// The action: exactly one of Weight, Drain and Maintenance.
	Weight      *int `json:"weight,omitempty"`      // serve at this weight (0 to 65535)
	Drain       bool `json:"drain,omitempty"`       // serve at weight 0: picked only when nothing else is left
	Maintenance bool `json:"maintenance,omitempty"` // left out of every snapshot
	// Deregistered marks the maintenance override Registry.Deregister
	// leaves, so that listings can tell it from a planned maintenance.
	Deregistered bool `json:"deregistered,omitempty"`

	By     string    `json:"by"`               // who; SetOverride fills in user@host
	Reason string    `json:"reason,omitempty"` // why, free text
	At     time.Time `json:"at"`               // when; SetOverride fills in the time
}

// Bounds on an override's free-text fields.
const (
	maxOverrideBy     = 128
	maxOverrideReason = 512
)

// overridePrefix is the record prefix of a service's overrides.
func overridePrefix(service string) string { return "override/" + service + "/" }

// overrideKey is the record key of an override: its ID, or its address
// hex-encoded (an address holds ':' and brackets, which keys cannot).
func overrideKey(service, id, address string) string {
	if id != "" {
		return overridePrefix(service) + id
	}
	return overridePrefix(service) + "addr-" + hex.EncodeToString([]byte(address))
}

// Action names what the override does: "drain", "weight N",
// "maintenance" or "deregistered".
func (o Override) Action() string {
	switch {
	case o.Deregistered:
		return "deregistered"
	case o.Maintenance:
		return "maintenance"
	case o.Drain:
		return "drain"
	case o.Weight != nil:
		return fmt.Sprintf("weight %d", *o.Weight)
	}
	return "none"
}

// Target is the ID or the address the override names.
func (o Override) Target() string {
	if o.ID != "" {
		return o.ID
	}
	return o.Address
}

// normalize validates o and fills in its defaults; it names the first
// offending field.
func (o Override) normalize() (Override, error) {
	if err := backend.ValidateService(o.Service); err != nil {
		return o, err
	}
	switch {
	case o.ID == "" && o.Address == "":
		return o, invalid("id", "empty: name the instance by ID or by address")
	case o.ID != "" && o.Address != "":
		return o, invalid("address", "%q beside id %q: name the instance by one of them", o.Address, o.ID)
	case o.ID != "":
		if err := checkOverrideID(o.ID); err != nil {
			return o, err
		}
	default:
		addr, err := backend.CanonicalAddress(o.Address)
		if err != nil {
			return o, err
		}
		o.Address = addr
	}
	n := 0
	for _, set := range []bool{o.Weight != nil, o.Drain, o.Maintenance} {
		if set {
			n++
		}
	}
	if n != 1 {
		return o, invalid("action", "%d of weight, drain and maintenance set: set exactly one", n)
	}
	if o.Weight != nil && (*o.Weight < 0 || *o.Weight > backend.MaxWeight) {
		return o, invalid("weight", "%d: want 0 to %d", *o.Weight, backend.MaxWeight)
	}
	if o.Deregistered && !o.Maintenance {
		return o, invalid("deregistered", "set without maintenance")
	}
	if err := checkText("by", o.By, maxOverrideBy); err != nil {
		return o, err
	}
	if err := checkText("reason", o.Reason, maxOverrideReason); err != nil {
		return o, err
	}
	if o.By == "" {
		o.By = DefaultActor()
	}
	if o.At.IsZero() {
		o.At = time.Now()
	}
	o.At = o.At.UTC().Truncate(time.Millisecond)
	if key := overrideKey(o.Service, o.ID, o.Address); len(key) > driver.MaxRecordKey {
		return o, invalid("id", "%d bytes: the override's key %d bytes, over the limit of %d", len(o.ID), len(key), driver.MaxRecordKey)
	}
	return o, nil
}

// checkOverrideID accepts instance IDs ([A-Za-z0-9][A-Za-z0-9._-]*).
func checkOverrideID(id string) error {
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return invalid("id", "%q: character %q at %d not allowed (want [A-Za-z0-9][A-Za-z0-9._-]*)", id, c, i)
		}
	}
	if len(id) > backend.MaxIDLen {
		return invalid("id", "%d bytes, at most %d allowed", len(id), backend.MaxIDLen)
	}
	return nil
}

// checkText bounds a free-text field and refuses control characters,
// which would let a reason rewrite an operator's terminal.
func checkText(field, s string, limit int) error {
	if len(s) > limit {
		return invalid(field, "%d bytes, over the limit of %d", len(s), limit)
	}
	if !utf8.ValidString(s) {
		return invalid(field, "not valid UTF-8")
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0 {
			return invalid(field, "control character %q", c)
		}
	}
	return nil
}

// DefaultActor is who an override is by when Override.By is empty:
// user@host of this process.
func DefaultActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	s := name + "@" + host
	if checkText("by", s, maxOverrideBy) != nil {
		return "unknown@unknown"
	}
	return s
}

// SetOverride stores o, replacing any override of the same instance.
// Invalid input is a *FieldError naming the field, and writes nothing.
// By defaults to user@host and At to now; the action is logged with
// both. It fails with an error wrapping errors.ErrUnsupported when the
// backend keeps no records.
func (r *Registry) SetOverride(ctx context.Context, o Override) error {
	o, err := o.normalize()
	if err != nil {
		return err
	}
	st, err := r.Records()
	if err != nil {
		return err
	}
	value, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if _, err := st.Put(ctx, Record{Key: overrideKey(o.Service, o.ID, o.Address), Value: value}); err != nil {
		return err
	}
	r.logAction("roster: override set", o)
	return nil
}

// ClearOverride removes the override of one instance of service, named
// by target: its ID, or its address (anything with a ':'). Clearing an
// override that does not exist is not an error.
func (r *Registry) ClearOverride(ctx context.Context, service, target string) error {
	o := Override{Service: service, Maintenance: true}
	if strings.Contains(target, ":") {
		o.Address = target
	} else {
		o.ID = target
	}
	o, err := o.normalize()
	if err != nil {
		return err
	}
	st, err := r.Records()
	if err != nil {
		return err
	}
	if err := st.Delete(ctx, overrideKey(o.Service, o.ID, o.Address), ""); err != nil {
		return err
	}
	if r.log != nil {
		r.log.Info("roster: override cleared", "service", o.Service, "target", o.Target(), "by", o.By)
	}
	return nil
}

// Overrides returns the overrides of service, or of every service when
// service is "", sorted by service and target. A record under the
// override prefix that does not decode is skipped.
func (r *Registry) Overrides(ctx context.Context, service string) ([]Override, error) {
	prefix := "override/"
	if service != "" {
		if err := backend.ValidateService(service); err != nil {
			return nil, err
		}
		prefix = overridePrefix(service)
	}
	st, err := r.Records()
	if err != nil {
		return nil, err
	}
	recs, err := st.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return r.decodeOverrides(recs, service), nil
}

// decodeOverrides reads override records; service "" accepts any.
func (r *Registry) decodeOverrides(recs []Record, service string) []Override {
	var out []Override
	for _, rec := range recs {
		var o Override
		err := json.Unmarshal(rec.Value, &o)
		if err == nil {
			o, err = o.normalize()
		}
		if err == nil && rec.Key != overrideKey(o.Service, o.ID, o.Address) {
			err = errors.New("stored at the key of another instance")
		}
		if err != nil || service != "" && o.Service != service {
			r.logf("roster: skipping an override record that does not decode", "key", rec.Key, "err", err)
			continue
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Override) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return strings.Compare(a.Target(), b.Target())
	})
	return out
}

func (r *Registry) logAction(msg string, o Override) {
	if r.log != nil {
		r.log.Info(msg, "service", o.Service, "target", o.Target(), "action", o.Action(),
			"by", o.By, "at", o.At, "reason", o.Reason)
	}
}

// applyOverrides returns s with ovs applied. Without overrides it is s
// itself: a registry nobody acts on pays nothing. s is never modified:
// snapshots are shared.
func applyOverrides(s Snapshot, ovs []Override) Snapshot {
	if len(ovs) == 0 {
		return s
	}
	out := make([]Instance, 0, len(s.Instances))
	for _, in := range s.Instances {
		o, ok := overrideOf(in, ovs)
		switch {
		case !ok:
		case o.Maintenance:
			continue
		case o.Drain:
			in = in.Clone()
			in.Weight = 0
		case o.Weight != nil:
			in = in.Clone()
			in.Weight = uint32(*o.Weight)
		}
		out = append(out, in)
	}
	s.Instances = out
	return s
}

// overrideOf finds the override of in: by ID first, then by address.
func overrideOf(in Instance, ovs []Override) (Override, bool) {
	var byAddr *Override
	for n := range ovs {
		o := &ovs[n]
		if o.ID != "" && o.ID == in.ID {
			return *o, true
		}
		if o.Address != "" && o.Address == in.Address && byAddr == nil {
			byAddr = o
		}
	}
	if byAddr != nil {
		return *byAddr, true
	}
	return Override{}, false
}

// Deregister removes an instance for good, whether its owner is alive
// or gone. o names the instance (Service, and ID or Address) and may say
// By and Reason; Deregister sets its action. It leaves a maintenance
// override marked Deregistered, so that a live owner's heartbeats cannot
// bring the instance back, and deletes the instance's records, so that a
// zombie (a record whose owner is gone) is gone from the backend too. The
// override stays until ClearOverride (roster restore): a deregistered
// address stays out across its owner's restarts. Roster cannot tell a
// live owner from a stuck one from outside, so the two are not told
// apart.
func (r *Registry) Deregister(ctx context.Context, o Override) error {
	o.Weight, o.Drain, o.Maintenance, o.Deregistered = nil, false, true, true
	o, err := o.normalize()
	if err != nil {
		return err
	}
	service := o.Service
	if err := r.SetOverride(ctx, o); err != nil {
		return err
	}
	bctx, cancel := r.bound(ctx)
	defer cancel()
	s, err := r.drv.List(bctx, service)
	if err != nil {
		return fmt.Errorf("deregister %s %s: the override is set; listing to remove the records: %w", service, o.Target(), err)
	}
	for _, in := range s.Instances {
		if in.ID != o.ID && (o.Address == "" || in.Address != o.Address) {
			continue
		}
		if err := r.remove(bctx, in); err != nil {
			return fmt.Errorf("deregister %s %s: the override is set; removing the record: %w", service, in.ID, err)
		}
	}
	return nil
}

// remove deletes another process's instance record: it takes the record
// over with a registration of its own at the backend's shortest TTL (a
// register is an upsert keyed by service and ID), then deregisters it. If
// the deregistration fails, the record expires at that TTL.
func (r *Registry) remove(ctx context.Context, in Instance) error {
	lim := r.drv.Limits()
	ttl, err := backend.ValidateTTL(max(lim.MinTTL, 2*time.Second), lim)
	if err != nil {
		return err
	}
	reg, err := r.drv.Register(ctx, in, ttl)
	if err != nil {
		return err
	}
	return reg.Deregister(ctx)
}

// sameOverride compares two decoded overrides field by field.
func sameOverride(a, b Override) bool {
	return a.Service == b.Service && a.ID == b.ID && a.Address == b.Address &&
		(a.Weight == nil) == (b.Weight == nil) && (a.Weight == nil || *a.Weight == *b.Weight) &&
		a.Drain == b.Drain && a.Maintenance == b.Maintenance && a.Deregistered == b.Deregistered &&
		a.By == b.By && a.Reason == b.Reason && a.At.Equal(b.At)
}

// firstOverridesWait bounds how long a new watch waits for the service's
// overrides before its first snapshot: long enough for one round trip to
// a healthy backend, short enough that a failing store cannot hold up
// discovery (the follower keeps trying, and applies them when read).
const firstOverridesWait = 2 * time.Second

// followOverrides makes e follow its service's overrides, and returns
// the function that stops it. Every watched service of a Registry shares
// one record watch of all overrides (overrideHub), so that watching many
// services costs the backend one more watch, not one per service. The
// first overrides are applied before it returns (within
// firstOverridesWait), so that a new watch's first snapshot already
// leaves out an instance in maintenance. A backend that keeps no records
// costs nothing.
func (e *entry) followOverrides() (stop func()) {
	if _, err := e.r.Records(); err != nil {
		return func() {}
	}
	return e.r.overrides.join(e)
}

// overrideHub follows every override of a Registry with one record watch
// on "override/" while at least one service is watched, and hands each
// watched service its own.
type overrideHub struct {
	r   *Registry
	mu  sync.Mutex
	cur *overrideRun // nil while no service is watched
}

// overrideRun is one life of the hub's record watch.
type overrideRun struct {
	cancel  context.CancelFunc
	first   chan struct{} // closed after the first read, good or not
	entries map[*entry]struct{}
	by      map[string][]Override // by service; guarded by the hub's mu
	read    bool                  // by holds a good read
}

func (h *overrideHub) join(e *entry) (stop func()) {
	h.mu.Lock()
	run := h.cur
	if run == nil {
		run = h.start()
		h.cur = run
	}
	run.entries[e] = struct{}{}
	ovs, read := run.by[e.service], run.read
	h.mu.Unlock()
	if read {
		e.setOverrides(ovs)
	} else {
		t := time.NewTimer(firstOverridesWait)
		select {
		case <-run.first:
		case <-t.C:
		}
		t.Stop()
	}
	return func() { h.leave(run, e) }
}

func (h *overrideHub) leave(run *overrideRun, e *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(run.entries, e)
	if len(run.entries) == 0 && h.cur == run {
		run.cancel()
		h.cur = nil
	}
}

// start opens the run's watch; h.mu held.
func (h *overrideHub) start() *overrideRun {
	ctx, cancel := context.WithCancel(context.Background())
	run := &overrideRun{cancel: cancel, first: make(chan struct{}), entries: map[*entry]struct{}{}}
	go h.follow(ctx, run)
	return run
}

func (h *overrideHub) follow(ctx context.Context, run *overrideRun) {
	defer run.cancel()
	st, err := h.r.Records()
	var w *RecordWatcher
	if err == nil {
		w, err = st.Watch(ctx, "override/")
	}
	if err != nil {
		close(run.first)
		return
	}
	defer w.Close()
	// One context for the watcher's whole life: a driver may bind its
	// stream to the context of the call that opened it.
	for n := 0; ; n++ {
		set, err := w.Next(ctx)
		if err == nil {
			h.deliver(run, h.r.decodeOverrides(set.Records, ""))
		}
		if n == 0 {
			close(run.first) // after the first overrides are in place
		}
		if errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return
		}
	}
}

// deliver hands each watched service of run its overrides. A stale read
// (an error) never gets here: the last overrides stay.
func (h *overrideHub) deliver(run *overrideRun, all []Override) {
	by := map[string][]Override{}
	for _, o := range all {
		by[o.Service] = append(by[o.Service], o)
	}
	h.mu.Lock()
	run.by, run.read = by, true
	entries := make([]*entry, 0, len(run.entries))
	for e := range run.entries {
		entries = append(entries, e)
	}
	h.mu.Unlock()
	for _, e := range entries {
		e.setOverrides(by[e.service])
	}
}

// lookupOverrides applies the overrides of s's service to a snapshot
// read without a watch. A backend that keeps no records, or none for
// the service, leaves s as it is; overrides that cannot be read are
// logged and s is served as the backend gave it: discovery does not fail
// for want of an override.
func (r *Registry) lookupOverrides(ctx context.Context, s Snapshot) Snapshot {
	st, err := r.Records()
	if err != nil {
		return s
	}
	recs, err := st.List(ctx, overridePrefix(s.Service))
	if err != nil {
		r.logf("roster: lookup without overrides: reading them failed", "service", s.Service, "err", err)
		return s
	}
	return applyOverrides(s, r.decodeOverrides(recs, s.Service))
}
