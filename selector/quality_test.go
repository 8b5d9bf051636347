package selector

// Quality tests: deterministic (seeded randomness, no timing) checks of
// the balance each strategy promises, against the targets of
// docs/research/load-balancing.md §9.3.

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

func withRand(src randSource) Option         { return func(c *config) { c.rng = src } }
func withClock(now func() int64) Option      { return func(c *config) { c.clock = now } }
func seeded(seed uint64) randSource          { return rand.NewPCG(seed, seed^0x5eed) }
func testPicker(s registry.Snapshot) *Picker { return pickerFor(s, seeded(1)) }

func pickerFor(s registry.Snapshot, src randSource) *Picker {
	p := &Picker{insts: s.Instances, rnd: rng{src}}
	for _, in := range s.Instances {
		p.weights = append(p.weights, in.Weight)
		p.eps = append(p.eps, &endpoint{})
	}
	return p
}

// lag returns max over prefixes k and instances i of |picks_i(k) − k·w_i/W|.
func lag(t *testing.T, a algorithm, w []uint32, picks int) (maxLag float64, counts []int) {
	t.Helper()
	var total float64
	for _, x := range w {
		total += float64(x)
	}
	counts = make([]int, len(w))
	for k := 1; k <= picks; k++ {
		counts[a.pick(0, false, 0)]++
		for i, x := range w {
			maxLag = max(maxLag, math.Abs(float64(counts[i])-float64(k)*float64(x)/total))
		}
	}
	return maxLag, counts
}

var wrrCases = []struct {
	name string
	w    []uint32
}{
	{"2,1", []uint32{2, 1}},
	{"5,1,1", []uint32{5, 1, 1}},
	{"1,2,3,4", []uint32{1, 2, 3, 4}},
	{"10,1x10", []uint32{10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	{"100,150,70,30", []uint32{100, 150, 70, 30}},
}

func TestSmoothWRRSequence(t *testing.T) {
	// The PHP article: weights 2 and 1 give A B A A B A …
	p := testPicker(snap(2, 2, 1))
	s := newWeightedRoundRobin(p, 64).(*smooth)
	s.next.Store(0)
	got := ""
	for range 6 {
		got += string(rune('A' + s.pick(0, false, 0)))
	}
	if got != "ABAABA" {
		t.Fatalf("weights 2,1: %s, want ABAABA", got)
	}
	// nginx's example: {5,1,1} → a a b a c a a.
	p = testPicker(snap(3, 5, 1, 1))
	s = newWeightedRoundRobin(p, 64).(*smooth)
	s.next.Store(0)
	got = ""
	for range 7 {
		got += string(rune('a' + s.pick(0, false, 0)))
	}
	if got != "aabacaa" {
		t.Fatalf("weights 5,1,1: %s, want aabacaa", got)
	}
}

func TestWRRSmoothness(t *testing.T) {
	for _, c := range wrrCases {
		t.Run("smooth/"+c.name, func(t *testing.T) {
			p := testPicker(snap(len(c.w), c.w...))
			s, ok := newWeightedRoundRobin(p, 64).(*smooth)
			if !ok {
				t.Fatal("small N did not get the smooth table")
			}
			s.next.Store(0)
			var sum uint32
			g := uint32(0)
			for _, x := range c.w {
				sum += x
				g = uint32(gcd(uint64(g), uint64(x)))
			}
			period := int(sum / g)
			l, counts := lag(t, s, c.w, 10*period)
			for i, x := range c.w {
				if counts[i] != 10*int(x/g) {
					t.Errorf("instance %d: %d picks in 10 periods, want exactly %d", i, counts[i], 10*x/g)
				}
			}
			t.Logf("max lag %.2f", l)
			if l > 1 {
				t.Errorf("max lag %.2f picks, want ≤ 1", l)
			}
		})
		t.Run("stride/"+c.name, func(t *testing.T) {
			p := testPicker(snap(len(c.w), c.w...))
			s := newStride(p)
			s.next.Store(0)
			var sum uint32
			for _, x := range c.w {
				sum += x
			}
			l, counts := lag(t, s, c.w, 10*int(sum))
			t.Logf("max lag %.2f, counts %v", l, counts)
			if l > 3 {
				t.Errorf("max lag %.2f picks, want ≤ 3", l)
			}
		})
	}
}

// Large N goes to the stride scheduler; weights are clamped to
// [0.01, 10] × mean so that one outlier cannot make picks loop.
func TestStrideLargeNAndClamp(t *testing.T) {
	w := make([]uint32, 200)
	for i := range w {
		w[i] = uint32(1 + i%7)
	}
	p := testPicker(snap(len(w), w...))
	if _, ok := newWeightedRoundRobin(p, 64).(*stride); !ok {
		t.Fatal("N=200 did not get the stride scheduler")
	}
	s := newStride(p)
	s.next.Store(0)
	l, _ := lag(t, s, w, 50*len(w))
	t.Logf("N=200 weights 1..7: max lag %.2f", l)
	if l > 3 {
		t.Errorf("max lag %.2f, want ≤ 3", l)
	}
	// One instance with 10^6 × the others' weight: clamped to 10 × mean.
	w2 := []uint32{1_000_000_000, 1000, 1000, 1000, 1000}
	s = newStride(testPicker(snap(5, w2...)))
	tries0 := s.next.Load()
	for range 10000 {
		s.pick(0, false, 0)
	}
	if tries := s.next.Load() - tries0; tries > 10000*11 {
		t.Errorf("%d sequence steps for 10000 picks: the clamp does not bound the skip loop", tries)
	}
}

// aliasShare returns the exact probability of each column of an alias table.
func aliasShare(a *alias) []float64 {
	p := make([]float64, a.n)
	for i := range p {
		keep := float64(a.prob[i]) / (1 << 32)
		p[i] += keep / float64(a.n)
		p[a.alias[i]] += (1 - keep) / float64(a.n)
	}
	return p
}

func TestAliasExact(t *testing.T) {
	r := rand.New(seeded(7))
	for _, n := range []int{1, 2, 3, 10, 100, 1000} {
		w := make([]uint32, n)
		var total float64
		for i := range w {
			w[i] = uint32(1 + r.IntN(1000))
			total += float64(w[i])
		}
		a := newAlias(testPicker(snap(n, w...)))
		for i, got := range aliasShare(a) {
			if want := float64(w[i]) / total; math.Abs(got-want) > 1e-6 {
				t.Fatalf("n=%d: instance %d share %.8f, want %.8f", n, i, got, want)
			}
		}
	}
}

// hashLoads maps keys random keys and returns max/mean and the owners.
func hashLoads(a algorithm, n, keys int, seed uint64) (float64, []uint32) {
	r := rand.New(seeded(seed))
	counts := make([]int, n)
	owners := make([]uint32, keys)
	for k := range owners {
		o := a.pick(r.Uint64(), true, 0)
		counts[o]++
		owners[k] = uint32(o)
	}
	mx := 0
	for _, c := range counts {
		mx = max(mx, c)
	}
	return float64(mx) / (float64(keys) / float64(n)), owners
}

const qualityKeys = 1_000_000

func TestRingBalance(t *testing.T) {
	s := snap(100)
	r := newRing(testPicker(s), nil, defaultVirtualNodes, 0, &shared{})
	ratio, _ := hashLoads(r, 100, qualityKeys, 1)
	t.Logf("ring N=100, %d vnodes, 1M keys: max/mean %.3f", defaultVirtualNodes, ratio)
	if ratio > 1.10 {
		t.Errorf("max/mean %.3f, want ≤ 1.10", ratio)
	}
}

func TestMaglevBalance(t *testing.T) {
	s := snap(100)
	m := newMaglev(testPicker(s), 0, 0, &shared{})
	ratio, _ := hashLoads(m, 100, qualityKeys, 1)
	t.Logf("maglev N=100, M=%d, 1M keys: max/mean %.3f", m.m, ratio)
	if ratio > 1.05 {
		t.Errorf("max/mean %.3f, want ≤ 1.05", ratio)
	}
}

// movement follows 1M keys through an Update of a real Selector and
// returns the moved fraction and the keys moved between instances present
// before and after.
func movement(t *testing.T, st Strategy, before, after registry.Snapshot) (moved, excess float64) {
	t.Helper()
	sel := mustNew(t, WithStrategy(st), withRand(seeded(3)))
	sel.Update(before)
	owner := func() []string {
		p := sel.cur.Load()
		r := rand.New(seeded(9))
		out := make([]string, qualityKeys)
		for k := range out {
			out[k] = p.insts[p.algo.pick(r.Uint64(), true, 0)].Address
		}
		return out
	}
	a := owner()
	sel.Update(after)
	b := owner()
	inAfter, inBefore := map[string]bool{}, map[string]bool{}
	for _, in := range after.Instances {
		inAfter[in.Address] = true
	}
	for _, in := range before.Instances {
		inBefore[in.Address] = true
	}
	var m, x int
	for k := range a {
		if a[k] != b[k] {
			m++
			if inAfter[a[k]] && inBefore[b[k]] {
				x++
			}
		}
	}
	return float64(m) / qualityKeys, float64(x) / qualityKeys
}

func TestHashKeyMovement(t *testing.T) {
	const n = 100
	base := snap(n)
	grown := snap(n + 1)
	shrunk := snap(n)
	shrunk.Instances = append(append([]registry.Instance(nil), shrunk.Instances[:37]...), shrunk.Instances[38:]...)
	for _, c := range []struct {
		st        Strategy
		tolerance float64 // × ideal
	}{{ConsistentHash, 1.1}, {Maglev, 2}} {
		t.Run(string(c.st), func(t *testing.T) {
			m, x := movement(t, c.st, base, grown)
			ideal := 1.0 / (n + 1)
			t.Logf("add one to %d: moved %.4f (ideal %.4f), between survivors %.4f", n, m, ideal, x)
			if m > c.tolerance*ideal {
				t.Errorf("add: moved %.4f > %.1f × ideal %.4f", m, c.tolerance, ideal)
			}
			if c.st == ConsistentHash && x != 0 {
				t.Errorf("add: %.4f of keys moved between surviving instances, want 0", x)
			}
			m, x = movement(t, c.st, base, shrunk)
			ideal = 1.0 / n
			t.Logf("remove one of %d: moved %.4f (ideal %.4f), between survivors %.4f", n, m, ideal, x)
			if m > c.tolerance*ideal {
				t.Errorf("remove: moved %.4f > %.1f × ideal %.4f", m, c.tolerance, ideal)
			}
			if c.st == ConsistentHash && x != 0 {
				t.Errorf("remove: %.4f of keys moved between surviving instances, want 0", x)
			}
		})
	}
}

// Every client must build the same ring from the same snapshot, whatever
// snapshots it saw before: the incremental build equals a fresh one.
func TestRingIncrementalEqualsFresh(t *testing.T) {
	sh := &shared{}
	a := snap(50)
	b := snap(60)
	b.Instances = b.Instances[5:] // 5 gone, 10 new
	b.Instances[3].Weight = 300   // one reweighted
	inc := newRing(testPicker(b), newRing(testPicker(a), nil, 100, 0, sh), 100, 0, sh)
	fresh := newRing(testPicker(b), nil, 100, 0, sh)
	if len(inc.hashes) != len(fresh.hashes) {
		t.Fatalf("incremental ring has %d points, fresh %d", len(inc.hashes), len(fresh.hashes))
	}
	for i := range inc.hashes {
		if inc.hashes[i] != fresh.hashes[i] || inc.owner[i] != fresh.owner[i] {
			t.Fatalf("point %d differs: %x/%d vs %x/%d", i, inc.hashes[i], inc.owner[i], fresh.hashes[i], fresh.owner[i])
		}
	}
}

func TestBoundedLoad(t *testing.T) {
	const n, c = 100, 1.25
	for _, st := range []Strategy{ConsistentHash, Maglev} {
		t.Run(string(st), func(t *testing.T) {
			// Few virtual nodes: without the bound the ring is far above c.
			sel := mustNew(t, WithStrategy(st), WithBoundedLoad(c), WithVirtualNodes(10), withMaglevTableSize(251), withRand(seeded(1)))
			sel.Update(snap(n))
			p := sel.cur.Load()
			r := rand.New(seeded(5))
			// Keys assigned one after the other and never released
			// (Done not called): the in-flight counts are the loads.
			const keys = 200_000
			for range keys {
				i := p.algo.pick(r.Uint64(), true, 0)
				sel.sh.add(&p.eps[i].inflight, 1)
				sel.sh.add(&sel.sh.total, 1)
			}
			var mx int64
			for _, ep := range p.eps {
				mx = max(mx, sel.sh.count(&ep.inflight))
			}
			mean := float64(keys) / n
			ratio := float64(mx) / mean
			t.Logf("%s N=%d c=%.2f: max/mean %.4f", st, n, c, ratio)
			if ratio > c+1/mean {
				t.Errorf("max/mean %.4f > c = %.2f", ratio, c)
			}
		})
	}
}

func TestLeastRequestScanIsLeastConnection(t *testing.T) {
	sel := mustNew(t, WithStrategy(LeastRequest), WithChoices(10), withRand(seeded(1)))
	sel.Update(snap(4))
	p := sel.cur.Load()
	for i, n := range []int64{3, 1, 4, 2} {
		sel.sh.add(&p.eps[i].inflight, n)
	}
	for range 20 {
		if i := p.algo.pick(0, false, 0); i != 1 {
			t.Fatalf("picked %d, want instance 1 (fewest in flight)", i)
		}
	}
}

func TestP2CEWMAAvoidsSlowAndRecovers(t *testing.T) {
	now := int64(0)
	sel := mustNew(t, WithStrategy(P2CEWMA), withRand(seeded(2)), withClock(func() int64 { return now }))
	sel.Update(snap(2))
	ctx := t.Context()
	share := func(rounds int, slow0 bool) float64 {
		n0 := 0
		for range rounds {
			in, done, err := sel.Pick(ctx, PickOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lat := int64(10e6)
			if in.ID == "i0000" {
				n0++
				if slow0 {
					lat = 100e6
				}
			}
			now += 1e6 // 1000 calls per second
			done.Done(nil, time.Duration(lat))
		}
		return float64(n0) / float64(rounds)
	}
	if s := share(5000, true); s > 0.2 {
		t.Errorf("slow instance got %.2f of the calls, want < 0.2", s)
	}
	// Healthy again: the estimate decays and traffic comes back.
	share(30000, false)
	if s := share(5000, false); s < 0.4 {
		t.Errorf("recovered instance got %.2f of the calls, want ≈ 0.5", s)
	}
}

// TestRingIsCapped: at 10,000 instances the ring stays within
// maxRingPoints, every instance keeps points in proportion to its weight,
// and keys still spread over every instance.
func TestRingIsCapped(t *testing.T) {
	w := make([]uint32, 10000)
	for i := range w {
		w[i] = uint32(100 + 100*(i%2)) // 100 and 200
	}
	s := mustNew(t, WithStrategy(ConsistentHash))
	s.Update(snap(len(w), w...))
	r := s.Picker().algo.(*ring)
	if len(r.hashes) > maxRingPoints {
		t.Fatalf("ring has %d points, cap %d", len(r.hashes), maxRingPoints)
	}
	for i, c := range r.counts {
		if want := r.counts[0] * int(w[i]) / int(w[0]); c != want {
			t.Fatalf("instance %d (weight %d) has %d points, want %d", i, w[i], c, want)
		}
	}
	seen := make([]bool, len(w))
	for k := range 1_000_000 {
		seen[r.pick(rehash(uint64(k), 1), true, 0)] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("instance %d got none of 1,000,000 keys", i)
		}
	}
}
