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
	scanning bool
}

func newLeastRequest(p *Picker, choices int) *leastRequest {
	n := len(p.insts)
	l := &leastRequest{eps: p.eps, n: uint64(n), choices: choices, rnd: p.rnd, scanning: choices >= n}
	for _, w := range p.weights[1:] {
		if w != p.weights[0] {
			l.w = make([]uint64, n)
			for i, w := range p.weights {
				l.w[i] = uint64(w)
			}
			l.sample = newAlias(p)
			break
		}
	}
	return l
}

// less reports whether instance a is less loaded than b.
func (l *leastRequest) less(a, b uint64) bool {
	ia, ib := l.eps[a].inflight.Load(), l.eps[b].inflight.Load()
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
	if l.scanning {
		// Start at a random instance so that ties spread.
		start := l.rnd.below(n)
		best := start
		for j := uint64(1); j < n; j++ {
			i := start + j
			if i >= n {
				i -= n
			}
			if l.less(i, best) {
				best = i
			}
		}
		return int(best)
	}
	// Two distinct samples (Finagle): a frozen instance cannot be compared
	// with itself and win.
	var a, b uint64
	if l.sample != nil {
		a = uint64(l.sample.pick(0, false, 0))
		b = uint64(l.sample.pick(0, false, 0))
		for try := 0; b == a && try < 3; try++ {
			b = uint64(l.sample.pick(0, false, 0))
		}
	} else {
		a, b = l.rnd.pair(n)
	}
	if l.less(b, a) {
		a = b
	}
	for k := 2; k < l.choices; k++ {
		c := l.rnd.below(n)
		if l.sample != nil {
			c = uint64(l.sample.pick(0, false, 0))
		}
		if l.less(c, a) {
			a = c
		}
	}
	return int(a)
}

// p2cEWMA compares two distinct random instances by peak-EWMA latency ×
// (in-flight + 1) and takes the cheaper one (Finagle's p2cPeakEwma,
// Linkerd). The clock it reads is the time of the last Done, so a pick
// never calls time.Now.
type p2cEWMA struct {
	eps []*endpoint
	rnd rng
	sh  *shared
}

func (p *p2cEWMA) pick(uint64, bool, int) int {
	n := uint64(len(p.eps))
	if n == 1 {
		return 0
	}
	a, b := p.rnd.pair(n)
	now := p.sh.clock.Load()
	if p.sh.load(p.eps[b], now) < p.sh.load(p.eps[a], now) {
		return int(b)
	}
	return int(a)
}
