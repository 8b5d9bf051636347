package agent

import (
	"slices"
	"sync"
	"time"

	"github.com/roster-go/roster/selector"
)

// window is how many recent latencies an instance keeps for its p50/p99.
const window = 256

// ewmaWeight is the weight of a new latency in the dashboard's moving
// average (about the last 10 reports).
const ewmaWeight = 0.1

// flightEpoch is half the selector's in-flight bound: the dashboard
// counts a pick in flight as the selector does, for one to two epochs at
// most (see selector.WithInflightBound), so a token never reported stops
// counting long before it expires.
const flightEpoch = selector.DefaultInflightBound / 2

// instStats is what the agent's clients did with one instance: the
// dashboard's picks, failures, p50/p99 and moving average.
type instStats struct {
	picks, failures uint64
	flight          [2]struct{ epoch, n int64 } // picks in flight by epoch, even and odd
	lat             [window]time.Duration
	n               int // reports so far (lat is a ring once n ≥ window)
	ewma            float64
}

// instanceStats is an instance's figures on the dashboard and in the
// state endpoint. Latencies are in milliseconds, as the clients reported.
type instanceStats struct {
	Picks    uint64  `json:"picks"`
	Failures uint64  `json:"failures"`
	Inflight int64   `json:"inflight"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	EWMA     float64 `json:"ewma_ms"`
}

// stats keeps instStats per service and instance ID, for the instances
// the services have now (prune drops the others).
type stats struct {
	mu  sync.Mutex
	by  map[string]map[string]*instStats
	buf []time.Duration
}

func newStats() *stats { return &stats{by: map[string]map[string]*instStats{}} }

// flightStart is where epochs count from, on the monotonic clock: about
// where the selector's do (its package is initialised just before).
var flightStart = time.Now()

// epoch returns the in-flight epoch of t.
func (s *stats) epoch(t time.Time) int64 { return int64(t.Sub(flightStart) / flightEpoch) }

func (s *stats) get(service, id string) *instStats {
	m := s.by[service]
	if m == nil {
		m = map[string]*instStats{}
		s.by[service] = m
	}
	st := m[id]
	if st == nil {
		st = &instStats{}
		m[id] = st
	}
	return st
}

// picked counts a pick made at the time issued.
func (s *stats) picked(service, id string, issued time.Time) {
	e := s.epoch(issued)
	s.mu.Lock()
	st := s.get(service, id)
	st.picks++
	if b := &st.flight[e&1]; b.epoch != e {
		*b = struct{ epoch, n int64 }{e, 1}
	} else {
		b.n++
	}
	s.mu.Unlock()
}

// reported ends a pick made at the time issued: failed counts it as a
// failure, aborted (an expired token, a caller that gave up) leaves the
// latencies alone. A pick older than its epoch's bucket is in flight no
// more, and its report leaves the count alone.
func (s *stats) reported(service, id string, issued time.Time, failed, aborted bool, latency time.Duration) {
	e := s.epoch(issued)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(service, id)
	if b := &st.flight[e&1]; b.epoch == e && b.n > 0 {
		b.n--
	}
	if failed {
		st.failures++
	}
	if aborted {
		return
	}
	st.lat[st.n%window] = latency
	v := ms(latency)
	if st.n == 0 {
		st.ewma = v
	} else {
		st.ewma += ewmaWeight * (v - st.ewma)
	}
	st.n++
}

// prune forgets the instances of service that keep rejects.
func (s *stats) prune(service string, keep func(id string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.by[service] {
		if !keep(id) {
			delete(s.by[service], id)
		}
	}
}

// forget drops the figures of a service the agent stopped following.
func (s *stats) forget(service string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.by, service)
}

// snapshot returns an instance's figures (zero if it was never picked).
func (s *stats) snapshot(service, id string) instanceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[service][id]
	if st == nil {
		return instanceStats{}
	}
	out := instanceStats{Picks: st.picks, Failures: st.failures, Inflight: st.inflightAt(s.epoch(time.Now())), EWMA: st.ewma}
	n := min(st.n, window)
	if n > 0 {
		s.buf = append(s.buf[:0], st.lat[:n]...)
		slices.Sort(s.buf)
		out.P50 = ms(s.buf[(n-1)*50/100])
		out.P99 = ms(s.buf[(n-1)*99/100])
	}
	return out
}

// inflightAt returns the picks in flight at epoch e: those of e and of
// the epoch before.
func (st *instStats) inflightAt(e int64) int64 {
	var n int64
	for _, b := range st.flight {
		if b.epoch == e || b.epoch == e-1 {
			n += b.n
		}
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
