package selector

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/roster-go/roster/registry"
)

// hostKey is what consistent hashing hashes for an instance: its address,
// so that an instance that re-registers under a new ID after a restart
// keeps its keys. Metadata "hash_key" overrides it (Envoy's hash_key: a
// StatefulSet identity that survives an address change).
func hostKey(in *registry.Instance) string {
	if k := in.Metadata["hash_key"]; k != "" {
		return k
	}
	return in.Address
}

// rehash derives another well-mixed hash for retry attempt n (n > 0).
func rehash(h uint64, n int) uint64 {
	h ^= uint64(n) * 0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// ring is a consistent-hash ring ("ketama") with virtual nodes per host:
// an instance of weight w gets ⌈vnodes × w / 100⌉ points, independent of
// the other instances, so adding or removing one never moves keys between
// the others (the gRPC/Envoy sizing by total ring size does, §8.3). A
// direct-mapped index over the top bits of the hash turns the lookup into
// one table read and a short scan instead of a binary search.
type ring struct {
	hashes []uint64 // sorted
	owner  []uint32 // index into Picker.insts
	keys   []string // host key of each instance
	counts []int    // points of each instance
	index  []uint32 // index[j] = first point with hash >> shift ≥ j
	shift  uint
	n      uint64
	rnd    rng
	bounded
}

// bounded implements bounded loads for ring and maglev.
type bounded struct {
	c   float64 // 0 = off
	eps []*endpoint
	sh  *shared
}

// walk returns the owner at owners[start] or, with bounded loads on, the
// first owner from there on (wrapping around) below its capacity among n
// instances; owners[start] again if every one is at capacity.
func (b *bounded) walk(owners []uint32, start int, n uint64) int {
	if b.c == 0 {
		return int(owners[start])
	}
	g := b.sh.epoch(b.sh.clock.read())
	limit := b.capacity(n, g)
	pos := start
	for range len(owners) {
		o := owners[pos]
		if b.eps[o].inflight.load(g) < limit {
			return int(o)
		}
		if pos++; pos == len(owners) {
			pos = 0
		}
	}
	return int(owners[start])
}

// capacity is ⌈c × (total in flight + 1) / n⌉ at epoch g.
func (b *bounded) capacity(n uint64, g uint32) int64 {
	return int64(math.Ceil(b.c * float64(b.sh.total.load(g)+1) / float64(n)))
}

// maxRingPoints caps the points of a ring: 1,000 virtual nodes per
// instance would be 10 million points (120 MB, seconds to build) at
// 10,000 instances. Above the cap the virtual nodes per instance shrink
// in proportion, which costs balance (≈ 1 + 1/√points-per-instance) but
// keeps a rebuild under 250 ms; at the cap, 10,000 instances get 20
// points each.
const maxRingPoints = 200_000

// ringVnodes returns the virtual nodes per weight-100 instance that keep
// the ring within maxRingPoints.
func ringVnodes(weights []uint32, vnodes int) int {
	var sum uint64
	for _, w := range weights {
		sum += uint64(w)
	}
	total := sum * uint64(vnodes) / registry.DefaultWeight
	if total <= maxRingPoints {
		return vnodes
	}
	return max(1, int(uint64(vnodes)*maxRingPoints/total))
}

func vnodeCount(w uint32, vnodes int) int {
	c := (uint64(w)*uint64(vnodes) + registry.DefaultWeight - 1) / registry.DefaultWeight
	return int(min(max(c, 1), uint64(vnodes)*16))
}

// points appends the sorted ring points of one host.
func points(dst []uint64, key string, count int, buf []byte) ([]uint64, []byte) {
	start := len(dst)
	buf = append(buf[:0], key...)
	buf = append(buf, '#', 0, 0, 0, 0)
	for i := range count {
		binary.LittleEndian.PutUint32(buf[len(buf)-4:], uint32(i))
		dst = append(dst, xxhash.Sum64(buf))
	}
	slices.Sort(dst[start:])
	return dst, buf
}

func newRing(p *Picker, old *ring, vnodes int, c float64, sh *shared) *ring {
	n := len(p.insts)
	r := &ring{
		keys: make([]string, n), counts: make([]int, n), n: uint64(n), rnd: p.rnd,
		bounded: bounded{c: c, eps: p.eps, sh: sh},
	}
	byKey := make(map[string]int, n)
	vnodes = ringVnodes(p.weights, vnodes)
	total := 0
	for i := range p.insts {
		r.keys[i] = hostKey(&p.insts[i])
		r.counts[i] = vnodeCount(p.weights[i], vnodes)
		total += r.counts[i]
		if _, dup := byKey[r.keys[i]]; dup {
			old = nil // two instances share a key: no incremental build
		}
		byKey[r.keys[i]] = i
	}
	// Keep the points of hosts that stay (same key, same count): they are
	// already sorted, so the new ring is a merge of the survivors with the
	// sorted points of the hosts that are new. O(points), no rehash.
	keepH, keepO, fresh := r.survivors(old, byKey)
	add := r.freshPoints(fresh)
	r.hashes = make([]uint64, 0, total)
	r.owner = make([]uint32, 0, total)
	x, y := 0, 0
	for x < len(keepH) || y < len(add) {
		if y == len(add) || (x < len(keepH) && keepH[x] <= add[y].h) {
			r.hashes, r.owner = append(r.hashes, keepH[x]), append(r.owner, keepO[x])
			x++
		} else {
			r.hashes, r.owner = append(r.hashes, add[y].h), append(r.owner, add[y].o)
			y++
		}
	}
	r.buildIndex()
	return r
}

// point is a ring point: its hash and its owner, an index into r.keys.
type point struct {
	h uint64
	o uint32
}

// survivors returns, in ring order, the points of old whose host stays in
// r with the same number of points (hashes, and owners renumbered for r),
// and which of r's hosts need their points computed. old may be nil.
func (r *ring) survivors(old *ring, byKey map[string]int) (keepH []uint64, keepO []uint32, fresh []bool) {
	fresh = make([]bool, len(r.keys))
	for i := range fresh {
		fresh[i] = true
	}
	if old == nil {
		return nil, nil, fresh
	}
	remap := make([]int, len(old.keys))
	for j, k := range old.keys {
		remap[j] = -1
		if i, ok := byKey[k]; ok && r.counts[i] == old.counts[j] {
			remap[j] = i
			fresh[i] = false
		}
	}
	keepH = make([]uint64, 0, len(old.hashes))
	keepO = make([]uint32, 0, len(old.hashes))
	for x, h := range old.hashes {
		if i := remap[old.owner[x]]; i >= 0 {
			keepH = append(keepH, h)
			keepO = append(keepO, uint32(i))
		}
	}
	return keepH, keepO, fresh
}

// freshPoints computes the points of the fresh hosts, sorted by hash and
// then owner (the order a full build gives, so every client agrees).
func (r *ring) freshPoints(fresh []bool) []point {
	var add []point
	var buf []byte
	var hs []uint64
	for i, f := range fresh {
		if !f {
			continue
		}
		hs, buf = points(hs[:0], r.keys[i], r.counts[i], buf)
		for _, h := range hs {
			add = append(add, point{h, uint32(i)})
		}
	}
	slices.SortFunc(add, func(a, b point) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.o, b.o)
	})
	return add
}

func (r *ring) buildIndex() {
	b := bits.Len(uint(len(r.hashes)))
	b = min(max(b, 1), 20)
	r.shift = uint(64 - b)
	r.index = make([]uint32, 1<<b+1)
	pos := 0
	for j := range r.index {
		for pos < len(r.hashes) && r.hashes[pos]>>r.shift < uint64(j) {
			pos++
		}
		r.index[j] = uint32(pos)
	}
}

// lookup returns the first point at or after h, wrapping around.
func (r *ring) lookup(h uint64) int {
	pos := int(r.index[h>>r.shift])
	for pos < len(r.hashes) && r.hashes[pos] < h {
		pos++
	}
	if pos == len(r.hashes) {
		pos = 0
	}
	return pos
}

func (r *ring) pick(key uint64, keyed bool, attempt int) int {
	return r.walk(r.owner, r.lookup(r.rnd.key(key, keyed, attempt)), r.n)
}

// maglev is a Maglev lookup table (Eisenbud et al., NSDI'16 §3.4): every
// instance walks its own permutation of the table slots (offset and skip
// from two hashes of its key) and claims the next free slot in turn, so
// each gets M/N slots ± 1. Weighted instances take turns in proportion to
// their weight (as in Envoy).
type maglev struct {
	table []uint32
	m     uint64
	n     uint64
	rnd   rng
	bounded
}

// Maglev table sizes: M ≥ 100 × N keeps every instance within ≈1 % of its
// share (paper); 65537 up to 655 instances, 655373 above.
const (
	maglevSmall = 65537
	maglevLarge = 655373
)

func newMaglev(p *Picker, size uint64, c float64, sh *shared) *maglev {
	n := len(p.insts)
	m := size
	if m == 0 {
		m = maglevSmall
		if uint64(n)*100 > maglevSmall {
			m = maglevLarge
		}
	}
	g := &maglev{table: make([]uint32, m), m: m, n: uint64(n), rnd: p.rnd, bounded: bounded{c: c, eps: p.eps, sh: sh}}
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	next := make([]uint64, n)
	credit := make([]float64, n)
	wmax := 0.0
	for i := range p.insts {
		k := hostKey(&p.insts[i])
		offset[i] = xxhash.Sum64String(k) % m
		skip[i] = rehash(xxhash.Sum64String(k), 1)%(m-1) + 1
		wmax = max(wmax, float64(p.weights[i]))
	}
	const empty = math.MaxUint32
	for i := range g.table {
		g.table[i] = empty
	}
	filled := uint64(0)
	for filled < m {
		for i := 0; i < n && filled < m; i++ {
			credit[i] += float64(p.weights[i]) / wmax
			if credit[i] < 1 {
				continue
			}
			credit[i]--
			for {
				slot := (offset[i] + next[i]*skip[i]) % m
				next[i]++
				if g.table[slot] == empty {
					g.table[slot] = uint32(i)
					filled++
					break
				}
			}
		}
	}
	return g
}

func (g *maglev) pick(key uint64, keyed bool, attempt int) int {
	slot, _ := bits.Mul64(g.rnd.key(key, keyed, attempt), g.m)
	return g.walk(g.table, int(slot), g.n)
}
