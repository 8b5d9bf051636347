package middleware

import (
	"cmp"
	"math"
	"slices"
)

// Ejection reasons, the values of the roster.ejection.reason attribute.
const (
	ejectConsecutive = "consecutive_failures"
	ejectSuccessRate = "success_rate"
)

// evalEvery: a host's successes check whether an evaluation is due only
// every evalEvery calls, to keep the clock off the success path (every
// failure checks). A host with RequestVolume calls checks often enough.
const evalEvery = 32

func (q *Quarantine) bySuccessRate() bool { return q.cfg.SuccessRateMinimumHosts > 0 }

// lookup returns the state of a service's instance, or nils.
func (q *Quarantine) lookup(service, id string) (*quarantined, *host) {
	sv, ok := q.services.Load(service)
	if !ok {
		return nil, nil
	}
	hv, ok := sv.(*quarantined).hosts.Load(id)
	if !ok {
		return nil, nil
	}
	return sv.(*quarantined), hv.(*host)
}

// host returns the state of instance id, creating it in zone and region.
func (s *quarantined) host(id, zone, region string) *host {
	if hv, ok := s.hosts.Load(id); ok {
		return hv.(*host)
	}
	hv, _ := s.hosts.LoadOrStore(id, &host{zone: zone, region: region})
	return hv.(*host)
}

// countOutcome counts a call for the success rate of its instance, and
// runs the evaluation when one is due.
func (q *Quarantine) countOutcome(service string, s *quarantined, h *host, failed bool, total int) {
	n := h.calls.Add(1)
	if failed {
		h.failures.Add(1)
	} else if n%evalEvery != 0 {
		return
	}
	now := q.now().UnixNano()
	next := s.nextEval.Load()
	if next == 0 {
		if s.nextEval.CompareAndSwap(0, now+int64(q.cfg.SuccessRateInterval)) {
			resetCounts(s) // the first interval starts now, not at the first call
		}
		return
	}
	if now >= next && s.nextEval.CompareAndSwap(next, now+int64(q.cfg.SuccessRateInterval)) {
		q.evaluate(service, s, total)
	}
}

func resetCounts(s *quarantined) {
	s.hosts.Range(func(_, v any) bool {
		v.(*host).calls.Store(0)
		v.(*host).failures.Store(0)
		return true
	})
}

type hostRate struct {
	id   string
	h    *host
	rate float64
}

// evaluate ends an interval: it resets every host's counts and ejects the
// admitted hosts whose success rate is an outlier, lowest first, as long
// as MaxEjectedPercent allows.
func (q *Quarantine) evaluate(service string, s *quarantined, total int) {
	cfg := q.cfg
	var rates []hostRate
	s.hosts.Range(func(k, v any) bool {
		h := v.(*host)
		calls, failures := h.calls.Swap(0), h.failures.Swap(0)
		if h.until.Load() == 0 && calls >= int64(cfg.SuccessRateRequestVolume) {
			rates = append(rates, hostRate{k.(string), h, float64(calls-failures) / float64(calls)})
		}
		return true
	})
	if len(rates) < cfg.SuccessRateMinimumHosts {
		return
	}
	threshold := successThreshold(rates, cfg.SuccessRateStdevFactor)
	slices.SortFunc(rates, func(a, b hostRate) int { return cmp.Compare(a.rate, b.rate) })
	for _, r := range rates {
		if r.rate >= threshold {
			break
		}
		q.eject(service, s, r.id, r.h, total, ejectSuccessRate)
	}
}

// successThreshold is mean − factor × stdev of the rates (population
// standard deviation, as Envoy).
func successThreshold(rates []hostRate, factor float64) float64 {
	var sum float64
	for _, r := range rates {
		sum += r.rate
	}
	mean := sum / float64(len(rates))
	var sq float64
	for _, r := range rates {
		sq += (r.rate - mean) * (r.rate - mean)
	}
	return mean - factor*math.Sqrt(sq/float64(len(rates)))
}
