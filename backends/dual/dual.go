// Package dual is the backend for a live migration between two backends.
// It registers every instance in both and reads the union of both. Import
// it beside the two backends, and open a registry with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/dual"
//
//	u := "dual://?" + url.Values{
//		"old":    {"consul://10.0.0.1:8500"},
//		"new":    {"etcd://10.0.0.2:2379"},
//		"prefer": {"old"},
//	}.Encode()
//	reg, err := registry.Open(ctx, u)
//
// [New] wraps two drivers you already have. A migration takes three
// deploys, with no downtime. First prefer=old, then prefer=new, then the
// new URL alone. docs/migration.md walks through them.
//
// A side that is down fails no write or read while the other side
// answers. It is written again at the next heartbeat. An operation fails
// only when both sides fail. Each side's error is classified by that
// side's ErrorKind. When both sides hold an ID, the preferred
// side's record is served. A side that cannot be reached keeps its last
// state in the union for hold, 15s by default.
//
// Both sides are called at once, and an operation waits for both. So a
// side that hangs delays writes and lookups up to the caller's deadline.
// Revisions are this driver's own counter. Limits are the stricter of
// the two sides'.
//
// docs/migration.md has the options, the behaviour under faults and the
// tests.
package dual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/internal/urls"

	"github.com/roster-go/roster/registry/driver"
)

// Scheme is the URL scheme of this backend.
const Scheme = "dual"

// DefaultHold is how long an unreachable side's last state stays in the
// union: the registry's default recovery window.
const DefaultHold = 15 * time.Second

func init() {
	driver.Register(Scheme, open, "prefer", "hold")
	urls.Nested("old", "new")
}

// side names, in the order of pairDriver.sides.
var sideNames = [2]string{"old", "new"}

func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	q, err := backend.ParseQuery(Scheme, u)
	if err != nil {
		return nil, err
	}
	var oldURL, newURL, prefer = "", "", "old"
	hold := DefaultHold
	q.String("old", &oldURL)
	q.String("new", &newURL)
	q.Enum("prefer", &prefer, "old", "new")
	q.Duration("hold", &hold)
	if err := q.Err(); err != nil {
		return nil, err
	}
	if u.Host != "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return nil, backend.InvalidURL(Scheme, "it takes only options (dual://?old=…&new=…)")
	}
	if oldURL == "" || newURL == "" {
		return nil, backend.InvalidURL(Scheme, "options old and new are both required")
	}
	if oldURL == newURL {
		return nil, backend.InvalidURL(Scheme, "old and new name the same registry")
	}
	// Both nested URLs are checked before either side is opened (etcd
	// with credentials dials at once): a typo in new must not reach old's
	// server first.
	oldSide, err := parseSide("old", oldURL)
	if err != nil {
		return nil, err
	}
	newSide, err := parseSide("new", newURL)
	if err != nil {
		return nil, err
	}
	a, err := oldSide.open(ctx)
	if err != nil {
		return nil, err
	}
	b, err := newSide.open(ctx)
	if err != nil {
		a.Close()
		return nil, err
	}
	return New(a, b, Options{PreferNew: prefer == "new", Hold: hold}), nil
}

// side is a nested URL, parsed, and the opener of its scheme.
type side struct {
	name   string
	u      *url.URL
	openFn driver.OpenFunc
}

// parseSide parses one nested URL and finds the scheme registered for it.
func parseSide(name, raw string) (side, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return side{}, backend.InvalidURL(Scheme, "option %s does not parse as a URL (URL-encode it)", name)
	case u.Opaque != "":
		return side{}, backend.InvalidURL(Scheme, "option %s: the \"//\" is missing (want %s://…)", name, u.Scheme)
	case strings.EqualFold(u.Scheme, Scheme):
		return side{}, backend.InvalidURL(Scheme, "option %s is itself a dual URL", name)
	}
	openFn, ok := backend.Lookup(u.Scheme)
	if !ok {
		return side{}, backend.InvalidURL(Scheme, "option %s: no backend registered for scheme %q (import it)", name, u.Scheme)
	}
	return side{name, u, openFn}, nil
}

// open opens the side's driver.
func (s side) open(ctx context.Context) (driver.Driver, error) {
	d, err := s.openFn(ctx, s.u)
	if err != nil {
		return nil, fmt.Errorf("dual: %s side: %w", s.name, err)
	}
	return d, nil
}

// Options tune a driver made with New.
type Options struct {
	PreferNew bool          // when both sides hold an ID, serve the new side's record
	Hold      time.Duration // see DefaultHold; 0 means DefaultHold, negative means no hold
}

// pairDriver writes to two drivers and reads their union.
type pairDriver struct {
	sides   [2]driver.Driver // old, new
	primary int              // index of the side preferred for reads
	hold    time.Duration
	rev     atomic.Uint64
	log     *slog.Logger

	mu       sync.Mutex
	services map[string]*state
	health   [2]health
}

// New returns a driver over oldSide and newSide; it closes both when
// closed. Wrap it with registry.New.
func New(oldSide, newSide driver.Driver, o Options) driver.Driver {
	d := &pairDriver{sides: [2]driver.Driver{oldSide, newSide}, hold: o.Hold, log: slog.Default(),
		services: map[string]*state{}}
	if o.PreferNew {
		d.primary = 1
	}
	if d.hold == 0 {
		d.hold = DefaultHold
	}
	return withStore(d)
}

// Limits implements driver.Driver: the stricter of the two sides.
func (d *pairDriver) Limits() driver.Limits {
	a, b := d.sides[0].Limits(), d.sides[1].Limits()
	maxTTL := max(a.MaxTTL, b.MaxTTL) // zero is no maximum
	if a.MaxTTL > 0 && b.MaxTTL > 0 {
		maxTTL = min(a.MaxTTL, b.MaxTTL)
	}
	return driver.Limits{MinTTL: max(a.MinTTL, b.MinTTL), TTLGranularity: max(a.TTLGranularity, b.TTLGranularity), MaxTTL: maxTTL}
}

// Local reports whether both sides are on this host: then loopback
// addresses are served (see registry.AllowLoopback).
func (d *pairDriver) Local() bool {
	for _, s := range d.sides {
		if l, ok := s.(backend.Local); !ok || !l.Local() {
			return false
		}
	}
	return true
}

// Close implements driver.Driver.
func (d *pairDriver) Close() error {
	return errors.Join(d.sides[0].Close(), d.sides[1].Close())
}

// classify gives side i's error the kind its driver's ErrorKind says, as
// Registry does for a driver of its own: each side's sentinel then
// survives the join of both sides' errors. An error of a call whose ctx
// ended is the caller's, left as it is.
func (d *pairDriver) classify(ctx context.Context, i int, err error) error {
	if err == nil || ctx.Err() != nil || isSentinel(err) {
		return err
	}
	kind := d.sides[i].ErrorKind(err)
	if kind != driver.ErrNotFound && kind != driver.ErrInvalid {
		kind = driver.ErrUnavailable
	}
	return fmt.Errorf("%w: %w", err, kind)
}

func isSentinel(err error) bool {
	return errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrNotFound) ||
		errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrClosed) ||
		errors.Is(err, driver.ErrConflict)
}

// both runs fn on the two sides at once and returns their errors.
func both(fn func(i int) error) [2]error {
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(i) }()
	}
	wg.Wait()
	return errs
}

// outcome records each side's health and returns nil when at least one
// side succeeded, else both errors joined.
func (d *pairDriver) outcome(op string, errs [2]error) error {
	d.noteHealth(op, errs, [2]bool{true, true})
	if errs[0] == nil || errs[1] == nil {
		return nil
	}
	return fmt.Errorf("dual: both sides failed: %w", joinSides(errs)) // each names op
}

// joinSides joins both sides' errors on one line, each named (errors.Join
// would put a newline between them); errors.Is matches either.
func joinSides(errs [2]error) error {
	for i, err := range errs {
		if err == nil {
			errs[i] = errors.New("no answer yet")
		}
	}
	return fmt.Errorf("%s side: %w; %s side: %w", sideNames[0], errs[0], sideNames[1], errs[1])
}

// health is what the driver knows of a side.
type health struct {
	answered bool   // its last call succeeded
	failed   bool   // its last call failed
	logged   bool   // its failure was logged
	op       string // the operation that failed, for the log
	err      error
}

// noteHealth records the answers of the sides heard (errs[i] counts only
// when heard[i]) and logs a side's health when it changes. A context
// error is the caller's, not the side's. A side's failure is logged once
// the other side answers — "serving from the other" is then true; while
// both fail, the operations' errors say so and nothing is logged, so that
// a command line tool prints one error, not log lines beside it.
func (d *pairDriver) noteHealth(op string, errs [2]error, heard [2]bool) {
	d.mu.Lock()
	var recovered [2]bool
	for i, err := range errs {
		if !heard[i] || errors.Is(err, context.Canceled) {
			continue
		}
		h := &d.health[i]
		if err == nil {
			recovered[i] = h.logged
			*h = health{answered: true}
		} else if !h.failed {
			*h = health{failed: true, op: op, err: err}
		}
	}
	var failed [2]health
	for i := range 2 {
		if h := &d.health[i]; h.failed && !h.logged && d.health[1-i].answered {
			h.logged, failed[i] = true, *h
		}
	}
	d.mu.Unlock()
	for i := range 2 {
		if failed[i].failed {
			d.log.Warn("roster/dual: side failing; serving from the other", "side", sideNames[i], "op", failed[i].op, "err", failed[i].err)
		}
		if recovered[i] {
			d.log.Info("roster/dual: side answering again", "side", sideNames[i], "op", op)
		}
	}
}

// Services implements driver.Driver: the union of both sides' names.
func (d *pairDriver) Services(ctx context.Context) ([]string, error) {
	var names [2][]string
	errs := both(func(i int) (err error) {
		names[i], err = d.sides[i].Services(ctx)
		return d.classify(ctx, i, err)
	})
	if err := d.outcome("services", errs); err != nil {
		return nil, err
	}
	out := slices.Concat(names[0], names[1])
	slices.Sort(out)
	return slices.Compact(out), nil
}

// noteSide is noteHealth for one side's answer.
func (d *pairDriver) noteSide(i int, op string, err error) {
	var errs [2]error
	var heard [2]bool
	errs[i], heard[i] = err, true
	d.noteHealth(op, errs, heard)
}

// ErrorKind implements driver.Driver. Each side's errors are classified
// by that side's ErrorKind when they happen (classify), so only a side's
// error from an ended context reaches here: transient.
func (d *pairDriver) ErrorKind(error) error { return driver.ErrUnavailable }
