package selector

import (
	"math"
	"sync/atomic"
)

// roundRobin is one atomic counter over the instances. The counter starts
// at a random value so that clients started together spread out
// (grpc-go does the same).
type roundRobin struct {
	next atomic.Uint64
	n    uint64
}

func newRoundRobin(p *Picker) *roundRobin {
	r := &roundRobin{n: uint64(len(p.insts))}
	r.next.Store(p.rnd.next())
	return r
}

func (r *roundRobin) pick(uint64, bool, int) int { return int(r.next.Add(1) % r.n) }

// random picks uniformly with the runtime's per-thread generator.
type random struct {
	n   uint64
	rnd rng
}

func (r *random) pick(uint64, bool, int) int { return int(r.rnd.below(r.n)) }

// alias is Vose's alias method: one random number per pick, O(1) whatever
// the weights. Column i is kept with probability prob[i]/2^32, else its
// alias is taken.
type alias struct {
	prob  []uint64
	alias []uint32
	n     uint64
	rnd   rng
}

func newAlias(p *Picker) *alias {
	n := len(p.insts)
	a := &alias{prob: make([]uint64, n), alias: make([]uint32, n), n: uint64(n), rnd: p.rnd}
	var total float64
	for _, w := range p.weights {
		total += float64(w)
	}
	scaled := make([]float64, n)
	var small, large []int
	for i, w := range p.weights {
		scaled[i] = float64(w) * float64(n) / total
		if scaled[i] < 1 {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a.prob[s] = uint64(scaled[s] * (1 << 32))
		a.alias[s] = uint32(l)
		scaled[l] = scaled[l] + scaled[s] - 1
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Whatever is left has probability 1 (up to rounding).
	for _, i := range append(small, large...) {
		a.prob[i] = math.MaxUint32 + 1
		a.alias[i] = uint32(i)
	}
	return a
}

func (a *alias) pick(uint64, bool, int) int {
	r := a.rnd.next()
	i := (r >> 32) * a.n >> 32 // the top 32 bits pick the column
	return a.choose(i, uint64(uint32(r)))
}

// choose keeps column i with probability prob[i]/2^32 (coin is uniform
// in [0, 2^32)), else takes its alias. It does not branch on the coin:
// the coin is random, so a branch on it would be mispredicted half the
// time, and the compiler does not turn this one into a conditional move.
func (a *alias) choose(i, coin uint64) int {
	j := uint64(a.alias[i])
	// All ones when coin < prob[i]: both are at most 2^32, so the sign
	// of the difference tells.
	keep := uint64(int64(coin-a.prob[i]) >> 63)
	return int(j ^ (j^i)&keep)
}

// pick32 picks from 32 random bits, so that one 64-bit draw gives two
// samples (P2C's candidates): u·n's integer part is the column and its
// fractional part, uniform in [0, 1) given the column, is the coin (to
// 32 − log2(n) bits: 18 bits at n = 10,000).
func (a *alias) pick32(u uint32) int {
	x := uint64(u) * a.n
	return a.choose(x>>32, x&0xffffffff)
}

// pair draws two samples from one random number.
func (a *alias) pair() (int, int) {
	r := a.rnd.next()
	return a.pick32(uint32(r >> 32)), a.pick32(uint32(r))
}
