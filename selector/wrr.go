package selector

import (
	"sync/atomic"
)

// Limits of the smooth weighted round-robin table.
const (
	maxSmoothPeriod = 1 << 13 // entries in one period (Σ weights / gcd)
)

// newWeightedRoundRobin returns the exact nginx smooth sequence as a table
// when it is small, else the static stride scheduler.
func newWeightedRoundRobin(p *Picker, smoothLimit int) algorithm {
	n := len(p.insts)
	w := make([]uint64, n)
	g := uint64(0)
	for i, wi := range p.weights {
		w[i] = uint64(wi)
		g = gcd(g, w[i])
	}
	var period uint64
	for i := range w {
		w[i] /= g
		period += w[i]
	}
	if n <= smoothLimit && period <= maxSmoothPeriod {
		return newSmooth(p, w, period)
	}
	return newStride(p)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// smooth replays one period of nginx's smooth weighted round robin
// (commit 52327e0): every step adds each weight to its current weight,
// picks the largest and subtracts the total from it. The sequence is
// computed once per Update; a pick is one atomic add and a table read, so
// it needs no lock, unlike nginx's O(n) step under a mutex.
type smooth struct {
	next   atomic.Uint64
	seq    []uint32
	period uint64
}

func newSmooth(p *Picker, w []uint64, period uint64) *smooth {
	n := len(w)
	cur := make([]int64, n)
	seq := make([]uint32, period)
	total := int64(period)
	for k := range seq {
		best := 0
		for i := range n {
			cur[i] += int64(w[i])
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		seq[k] = uint32(best)
	}
	s := &smooth{seq: seq, period: period}
	// Start at a random point of the period: clients started together do
	// not send their first requests to the same instance.
	s.next.Store(p.rnd.next() % period)
	return s
}

func (s *smooth) pick(uint64, bool, int) int {
	return int(s.seq[(s.next.Add(1)-1)%s.period])
}

// Static stride scheduler (grpc-core static_stride_scheduler.cc, also in
// grpc-go and grpc-java): weights are scaled so that the largest is 65535;
// sequence number idx visits backend idx % n in generation idx / n, and
// takes it when (w × generation + backend × 32767) mod 65535 ≥ 65535 − w.
// One atomic add per try, no lock. The expected tries per pick are
// max/mean, which the clamp to [0.01, 10] × the mean (grpc-core, missing in
// grpc-go) bounds to 10.
type stride struct {
	next atomic.Uint64
	w    []uint16
	n    uint64
}

const (
	strideMax    = 65535
	strideOffset = strideMax / 2
	clampLow     = 0.01
	clampHigh    = 10.0
)

func newStride(p *Picker) *stride {
	n := len(p.insts)
	var sum float64
	for _, w := range p.weights {
		sum += float64(w)
	}
	mean := sum / float64(n)
	wf := make([]float64, n)
	var wmax float64
	for i, w := range p.weights {
		wf[i] = min(max(float64(w), clampLow*mean), clampHigh*mean)
		wmax = max(wmax, wf[i])
	}
	s := &stride{w: make([]uint16, n), n: uint64(n)}
	for i := range wf {
		s.w[i] = uint16(max(1, min(strideMax, int(wf[i]/wmax*strideMax+0.5))))
	}
	s.next.Store(p.rnd.next())
	return s
}

func (s *stride) pick(uint64, bool, int) int {
	for {
		idx := s.next.Add(1) - 1
		b := idx % s.n
		gen := idx / s.n
		w := uint64(s.w[b])
		if (w*gen+b*strideOffset)%strideMax >= strideMax-w {
			return int(b)
		}
	}
}
