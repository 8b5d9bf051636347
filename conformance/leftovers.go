package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roster-go/roster/registry"
)

// MaxRecordTTL bounds the TTL of every record [RunChecks] writes. A run
// killed outright (SIGKILL, the OOM killer) leaves nothing that outlives
// it by more than this, on a backend that honours TTLs. [Run], for test
// servers the test owns, also registers the huge TTLs of TTLEdges.
const MaxRecordTTL = 30 * time.Second

// leftoverAge is how old a run must be before another run may delete its
// records. It covers a marker not yet visible and clocks that disagree.
const leftoverAge = 2 * time.Minute

// A run's service names are "conf-<start>-<run>-<random>-<base>", where
// start is the run's start in Unix seconds, base 36, and run is random.
// Its marker is "conf-<start>-<run>-run", registered for the whole run.
// thisRun is the run of this process.
var thisRun = newRun(time.Now())

type run struct {
	start time.Time
	id    string // "<start>-<run>"
}

func newRun(now time.Time) run {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return run{start: now, id: strconv.FormatInt(now.Unix(), 36) + "-" + hex.EncodeToString(b[:])}
}

func (r run) marker() string { return "conf-" + r.id + "-run" }

// service returns a fresh service name of this run.
func service(base string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "conf-" + thisRun.id + "-" + hex.EncodeToString(b[:]) + "-" + base
}

// owner parses a conformance service name. legacy is true for the names
// of runs before markers ("conf-<8 hex>-<base>"), which no run can own.
func owner(name string) (r run, legacy, ok bool) {
	f := strings.SplitN(name, "-", 5)
	if len(f) < 3 || f[0] != "conf" {
		return run{}, false, false
	}
	if len(f[1]) == 8 && isHex(f[1]) {
		return run{}, true, true
	}
	secs, err := strconv.ParseInt(f[1], 36, 64)
	if err != nil || len(f) < 4 || len(f[2]) != 6 || !isHex(f[2]) {
		return run{}, false, false
	}
	return run{start: time.Unix(secs, 0), id: f[1] + "-" + f[2]}, false, true
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// holdMarker registers this run's marker on r, so that other runs leave
// its records alone; the registry heartbeats it until r closes.
func holdMarker(ctx context.Context, r *registry.Registry) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in := registry.Instance{Service: thisRun.marker(), Address: "127.0.0.1:9"}
	_, err := r.Register(ctx, in, registry.WithTTL(max(r.Limits().MinTTL, 10*time.Second)))
	return err
}

// CleanLeftovers deletes what earlier runs killed before their cleanup
// left on the backend, and returns the services it emptied. A record is
// a leftover when its service is named by a run that started more than
// two minutes ago and whose marker is no longer listed, or by a run of a
// Roster without markers ("conf-<8 hex>-…"). So two runs of this version
// against one deployment never delete each other's records. It takes
// each record over with a short TTL and deregisters it, so even a
// cleanup killed half way leaves nothing lasting.
func CleanLeftovers(ctx context.Context, h Harness) ([]string, error) {
	s := &suite{h: h, cfg: h.Config().withDefaults()}
	r, err := s.newRegistry(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	names, err := r.Services(ctx)
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	live := map[string]bool{}
	for _, n := range names {
		live[n] = true
	}
	var cleaned []string
	var errs []error
	for _, n := range names {
		o, legacy, ok := owner(n)
		if !ok || !legacy && (n == o.marker() || time.Since(o.start) < leftoverAge || live[o.marker()]) {
			continue
		}
		if err := empty(ctx, r, n); err != nil {
			errs = append(errs, err)
			continue
		}
		cleaned = append(cleaned, n)
	}
	return cleaned, errors.Join(errs...)
}

// empty deregisters every instance of service.
func empty(ctx context.Context, r *registry.Registry, service string) error {
	snap, err := r.Lookup(ctx, service)
	if err != nil {
		return fmt.Errorf("look up %s: %w", service, err)
	}
	ttl := max(r.Limits().MinTTL, 2*time.Second)
	for _, in := range snap.Instances {
		l, err := r.Register(ctx, in, registry.WithTTL(ttl))
		if err != nil {
			return fmt.Errorf("take over %s/%s: %w", service, in.ID, err)
		}
		if err := l.Deregister(ctx); err != nil {
			return fmt.Errorf("deregister %s/%s: %w", service, in.ID, err)
		}
	}
	return nil
}
