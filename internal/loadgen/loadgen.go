// Package loadgen is the load generator behind "roster bench". It
// registers N instances across S services from P simulated processes.
// Each process is a separate registry.Registry with its own connections.
// It holds the instances with heartbeats, watches them from W more
// processes, and measures what each operation costs.
//
// Everything it writes lives under services named bench-<run>-sNNNN, with
// a run ID drawn at random. Run deregisters it all before it returns, also
// when it fails. A crashed run leaves instances that expire after their
// TTL.
package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/roster-go/roster/registry"
)

// Config is one run. Counts and durations must be positive.
type Config struct {
	URL       string        // registry URL
	Instances int           // N, spread evenly over the services
	Services  int           // S
	Processes int           // P registering processes
	Watchers  int           // W watching processes, each watching every service
	Workers   int           // concurrent registrations
	TTL       time.Duration // lease TTL
	Hold      time.Duration // how long to hold the leases, measuring heartbeat cost
	Probes    int           // deregistrations (and lookups) timed; crashes time Probes/10, at least 1
	// Progress, if set, is called with a short line as the run advances.
	Progress func(line string)
}

// Validate reports the first invalid field, naming it.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"instances", c.Instances}, {"services", c.Services}, {"processes", c.Processes}, {"watchers", c.Watchers}, {"workers", c.Workers}, {"probes", c.Probes}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", registry.ErrInvalid, f.name, f.v)
		}
	}
	if c.TTL <= 0 {
		return fmt.Errorf("%w: ttl must be positive, got %v", registry.ErrInvalid, c.TTL)
	}
	if c.Hold <= 0 {
		return fmt.Errorf("%w: hold must be positive, got %v", registry.ErrInvalid, c.Hold)
	}
	if c.Services > c.Instances {
		return fmt.Errorf("%w: services (%d) must not exceed instances (%d)", registry.ErrInvalid, c.Services, c.Instances)
	}
	if c.URL == "" {
		return fmt.Errorf("%w: no registry URL", registry.ErrInvalid)
	}
	return nil
}

// Run performs one run and returns its report. It cleans up what it
// registered before returning.
func Run(ctx context.Context, c Config) (Report, error) {
	if err := c.Validate(); err != nil {
		return Report{}, err
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	b := &bench{c: c, run: runID()}
	defer b.close()
	rep := Report{Instances: c.Instances, Services: c.Services, Processes: c.Processes, Watchers: c.Watchers, TTL: Duration(c.TTL)}
	steps := []struct {
		name string
		do   func(context.Context, *Report) error
	}{
		{"open", b.open}, {"watch", b.watch}, {"register", b.register}, {"hold", b.hold},
		{"lookup", b.lookup}, {"deregister", b.deregister}, {"crash", b.crash},
	}
	for _, s := range steps {
		c.Progress(s.name)
		if err := s.do(ctx, &rep); err != nil {
			return rep, fmt.Errorf("bench %s: %w", s.name, err)
		}
	}
	return rep, nil
}

func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errTimeout is returned when watchers do not see a change in time.
var errTimeout = errors.New("watchers did not converge")
