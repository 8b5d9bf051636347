package selector

// leastRequest compares `choices` random instances by requests in flight
// (gRPC A48, Envoy). With unequal weights the candidates are sampled in
// proportion to their weight (alias method) and compared by in-flight ÷
// weight, so that an idle service still splits by weight and a busy one
// keeps in-flight counts proportional to weight. When choices ≥ n it scans
// every instance: the PHP article's least-connection rule.
type leastRequest struct {
	eps      []*endpoint
	w        []uint64 // nil when all weights are equal
	sample   *alias   // weighted sampling; nil when all weights are equal
	n        uint64
	choices  int
	rnd      rng
	sh       *shared
	scanning bool
}

func newLeastRequest(p *Picker, choices int) *leastRequest {
	n := len(p.insts)
	l := &leastRequest{eps: p.eps, n: uint64(n), choices: choices, rnd: p.rnd, sh: p.sh, scanning: choices >= n}
	if !sameWeights(p.weights) {
		l.w = make([]uint64, n)
		for i, w := range p.weights {
			l.w[i] = uint64(w)
		}
		l.sample = newAlias(p)
	}
	return l
}

// less reports whether instance a is less loaded than b at epoch g.
func (l *leastRequest) less(a, b uint64, g uint32) bool {
	ia, ib := l.eps[a].inflight.load(g), l.eps[b].inflight.load(g)
	if l.w == nil {
		return ia < ib
	}
	return uint64(ia)*l.w[b] < uint64(ib)*l.w[a]
}

func (l *leastRequest) pick(uint64, bool, int) int {
	n := l.n
	if n == 1 {
		return 0
	}
	g := l.sh.epoch(l.sh.clock.read())
	if l.scanning {
		// Start at a random instance so that ties spread.
		start := l.rnd.below(n)
		best := start
		for j := uint64(1); j < n; j++ {
			i := start + j
			if i >= n {
				i -= n
			}
			if l.less(i, best, g) {
				best = i
			}
		}
		return int(best)
	}
	// Two distinct samples (Finagle): a frozen instance cannot be compared
	// with itself and win.
	var a, b uint64
	if l.sample != nil {
		x, y := l.sample.pair()
		a, b = uint64(x), uint64(y)
		for try := 0; b == a && try < 3; try++ {
			b = uint64(l.sample.pick(0, false, 0))
		}
	} else {
		a, b = l.rnd.pair(n)
	}
	if l.less(b, a, g) {
		a = b
	}
	for k := 2; k < l.choices; k++ {
		c := l.rnd.below(n)
		if l.sample != nil {
			c = uint64(l.sample.pick(0, false, 0))
		}
		if l.less(c, a, g) {
			a = c
		}
	}
	return int(a)
}

// p2cEWMA compares two random instances by peak-EWMA latency ×
// (in-flight + 1) and takes the cheaper one (Finagle's p2cPeakEwma,
// Linkerd). The clock it reads is the coarse clock, so a pick never
// calls time.Now.
//
// Equal weights: the two candidates are distinct (Finagle), so a frozen
// instance is never compared with itself and picked, and the cheaper one
// wins.
//
// Unequal weights: each candidate is drawn in proportion to its weight,
// with replacement, requests in flight count in proportion to mean
// weight ÷ weight, and when the two loads are within 3× of each other the
// comparison is a toss: a wins with probability Lb ÷ (La + Lb). A hard
// comparison cannot split by weight: when latencies are alike, the
// instance picked least often has the most decayed (lowest) estimate, and
// a peak estimator sees fewer peaks on it, so it would win every close
// call and drag the split back to even. With a toss that is fair when the
// costs are equal, a candidate drawn by weight is picked in proportion to
// its weight exactly (P(i) = p_i² + Σ_j 2·p_i·p_j·½ = p_i); beyond 3× the
// cheaper one wins outright, so a slow instance is still avoided (the
// simulation's p99 with one 3× slower backend: 1.18× healthy). Under load
// the in-flight term keeps in-flight ÷ weight level, so the load stays
// proportional to weight. The price of drawing with replacement is that
// an instance is compared with itself with probability p_i².
type p2cEWMA struct {
	eps    []*endpoint
	rnd    rng
	sh     *shared
	sample *alias    // nil when all weights are equal
	inv    []float64 // mean weight ÷ weight; nil when all are equal
}

func newP2CEWMA(p *Picker, sh *shared) *p2cEWMA {
	e := &p2cEWMA{eps: p.eps, rnd: p.rnd, sh: sh}
	if !sameWeights(p.weights) {
		e.sample = newAlias(p)
		e.inv = make([]float64, len(p.weights))
		var sum float64
		for _, w := range p.weights {
			sum += float64(w)
		}
		mean := sum / float64(len(p.weights))
		for i, w := range p.weights {
			e.inv[i] = mean / float64(w)
		}
	}
	return e
}

func sameWeights(w []uint32) bool {
	for _, x := range w[1:] {
		if x != w[0] {
			return false
		}
	}
	return true
}

// pick chooses between the candidates with conditional moves rather than
// branches: which one wins is random, so a branch on it is mispredicted
// half the time, and each miss costs more than the comparison.
func (p *p2cEWMA) pick(uint64, bool, int) int {
	n := uint64(len(p.eps))
	if n == 1 {
		return 0
	}
	now := p.sh.clock.read()
	if p.sample == nil {
		a, b := p.rnd.pair(n)
		i := a
		if p.sh.load(p.eps[b], now, 1) < p.sh.load(p.eps[a], now, 1) {
			i = b
		}
		return int(i)
	}
	x := p.rnd.next()
	a, b := p.sample.pick32(uint32(x>>32)), p.sample.pick32(uint32(x))
	if a == b {
		return a
	}
	la, lb := p.sh.load(p.eps[a], now, p.inv[a]), p.sh.load(p.eps[b], now, p.inv[b])
	// The toss: a with probability lb / (la + lb) (b when both are 0: b
	// is as random as a); u is uniform in [0, 1), from the draw that
	// chose a and b, mixed: a second draw would cost a tenth of the pick,
	// and given a and b, x still has most of its 64 random bits.
	u := float64(rehash(x, tossSalt)>>11) / (1 << 53)
	i := b
	if u*(la+lb) < lb {
		i = a
	}
	// Beyond tossRange the cheaper one wins outright.
	if lb > tossRange*la {
		i = a
	}
	if la > tossRange*lb {
		i = b
	}
	return i
}

// tossRange is the ratio of two loads beyond which weighted P2C takes the
// cheaper candidate outright instead of tossing.
const tossRange = 3

// tossSalt derives the toss of weighted P2C from its candidates' draw.
const tossSalt = 0x7055
