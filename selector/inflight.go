package selector

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// DefaultInflightBound is how long, at most, a pick whose Done is never
// called counts as a request in flight: 2^33 ns, about 8.6 s. A caller
// that crashed or forgot Done would otherwise raise its instance's count
// forever, and LeastRequest, P2CEWMA and bounded loads would starve the
// instance. See WithInflightBound.
const DefaultInflightBound = time.Duration(1 << 33)

// gauge counts requests in flight so that a pick never ended stops
// counting within a bound. It has two buckets, for even and odd epochs
// of 2^shift ns; each is a word of the epoch (high 32 bits) and the
// picks of that epoch still in flight (low 32 bits). A pick adds to the
// bucket of its epoch, replacing the count of an epoch two or more ago;
// Done subtracts from the bucket the pick added to while it still holds
// that epoch; a read sums the buckets of this epoch and the one before.
// So a pick counts for one to two epochs at most, and a late Done finds
// its epoch gone and changes nothing: no count goes negative.
type gauge struct{ b [2]atomic.Uint64 }

// add counts a pick of epoch g and returns the epoch it was counted in
// (a later one if a pick with a newer clock took the bucket meanwhile).
func (c *gauge) add(g uint32) uint32 {
	b := &c.b[g&1]
	// One atomic add in the common case. Added to a bucket of an older
	// epoch, the one is lost with that epoch's count when it is replaced.
	w := b.Add(1)
	for int32(uint32(w>>32)-g) < 0 {
		if b.CompareAndSwap(w, uint64(g)<<32|1) {
			return g
		}
		if w = b.Load(); int32(uint32(w>>32)-g) >= 0 {
			w = b.Add(1)
		}
	}
	return uint32(w >> 32)
}

// done ends a pick counted in epoch g, unless its bucket moved on.
func (c *gauge) done(g uint32) {
	b := &c.b[g&1]
	for {
		w := b.Load()
		if uint32(w>>32) != g || uint32(w) == 0 {
			return
		}
		if b.CompareAndSwap(w, w-1) {
			return
		}
	}
}

// load returns the picks in flight at epoch g.
func (c *gauge) load(g uint32) int64 { return live(c.b[0].Load(), g) + live(c.b[1].Load(), g) }

// live returns the count of bucket w if its epoch is g or the one before
// (or the one after: a reader whose clock is a little behind).
func live(w uint64, g uint32) int64 {
	if g-uint32(w>>32)+1 <= 2 {
		return int64(uint32(w))
	}
	return 0
}

// epoch returns the in-flight epoch of the coarse time now.
func (sh *shared) epoch(now int64) uint32 { return uint32(uint64(now) >> sh.shift) }

// inflightShift returns the epoch length (a power of two, in ns) whose
// double is the largest not above bound.
func inflightShift(bound time.Duration) uint8 {
	return uint8(bits.Len64(uint64(bound)) - 2)
}
