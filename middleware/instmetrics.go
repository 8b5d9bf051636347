package middleware

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/roster-go/roster/internal/otelkey"
	"github.com/roster-go/roster/registry"
)

// WithInstanceMetrics adds per-instance series: picks and failed
// attempts by instance ID (roster.client.instance.picks and
// roster.client.instance.failures). Off by default, since instance IDs
// are new at every restart. The series of an instance end when it
// leaves its service's snapshot, or when the service is no longer
// followed, so they stay as many as the live instances.
func WithInstanceMetrics() Option { return func(c *clientConfig) { c.instMetrics = true } }

// instMetrics holds the counts of WithInstanceMetrics. Observable
// counters read them: a series the callback no longer observes is
// dropped by the SDK, which synchronous instruments cannot do.
type instMetrics struct {
	picks    metric.Int64ObservableCounter
	failures metric.Int64ObservableCounter
	reg      metric.Registration

	mu sync.RWMutex
	m  map[instKey]*instCounts
}

type instKey struct{ service, id string }

// instCounts are one instance's counts, with their label sets built
// once. fails is indexed by class-1: business, retryable, fatal, abort.
type instCounts struct {
	picks    atomic.Int64
	fails    [4]atomic.Int64
	pickSet  attribute.Set
	failSets [4]attribute.Set
}

func newInstMetrics(m metric.Meter) *instMetrics {
	im := &instMetrics{m: map[instKey]*instCounts{}}
	im.picks, _ = m.Int64ObservableCounter("roster.client.instance.picks",
		metric.WithDescription("Instances picked for an attempt, by roster.instance.id (WithInstanceMetrics)."))
	im.failures, _ = m.Int64ObservableCounter("roster.client.instance.failures",
		metric.WithDescription("Failed attempts, by roster.instance.id and roster.outcome (WithInstanceMetrics)."))
	im.reg, _ = m.RegisterCallback(im.observe, im.picks, im.failures)
	return im
}

func (im *instMetrics) observe(_ context.Context, o metric.Observer) error {
	im.mu.RLock()
	defer im.mu.RUnlock()
	for _, c := range im.m {
		o.ObserveInt64(im.picks, c.picks.Load(), metric.WithAttributeSet(c.pickSet))
		for i := range c.fails {
			if n := c.fails[i].Load(); n > 0 {
				o.ObserveInt64(im.failures, n, metric.WithAttributeSet(c.failSets[i]))
			}
		}
	}
	return nil
}

// counts returns the counts of an instance, made on its first use.
func (im *instMetrics) counts(service, id, zone string) *instCounts {
	k := instKey{service, id}
	im.mu.RLock()
	c := im.m[k]
	im.mu.RUnlock()
	if c != nil {
		return c
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if c = im.m[k]; c != nil {
		return c
	}
	base := []attribute.KeyValue{otelkey.Service.String(service), otelkey.InstanceID.String(id), otelkey.Zone.String(zone)}
	c = &instCounts{pickSet: attribute.NewSet(base...)}
	for i := range c.failSets {
		c.failSets[i] = attribute.NewSet(append(base[:3:3], otelkey.Outcome.String(string(outcomeOf(Class(i+1)))))...)
	}
	im.m[k] = c
	return c
}

func (im *instMetrics) pick(service, id, zone string) {
	im.counts(service, id, zone).picks.Add(1)
}

func (im *instMetrics) failure(service, id, zone string, class Class) {
	if class >= Business && class <= Abort {
		im.counts(service, id, zone).fails[class-1].Add(1)
	}
}

// prune ends the series of the instances of service not in live (all of
// them when live is nil).
func (im *instMetrics) prune(service string, live []registry.Instance) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for k := range im.m {
		if k.service == service && !hasID(live, k.id) {
			delete(im.m, k)
		}
	}
}

func hasID(ins []registry.Instance, id string) bool {
	for i := range ins {
		if ins[i].ID == id {
			return true
		}
	}
	return false
}

func (im *instMetrics) close() {
	if im.reg != nil {
		_ = im.reg.Unregister()
	}
}
