package selector

import (
	"fmt"
	"time"
)

// Strategy names a load-balancing algorithm. The string values are the
// names used in configuration files; ParseStrategy and New reject any other.
type Strategy string

// The strategies. See docs/selector.md for how each one works and when to
// use it.
const (
	// RoundRobin cycles through the instances with one atomic counter that
	// starts at a random offset, so clients started together do not all hit
	// the same instance first. Weights are ignored (except 0 = draining).
	RoundRobin Strategy = "round_robin"
	// WeightedRoundRobin gives each instance a share proportional to its
	// Weight. Up to 64 instances (and a short period) it replays the exact
	// nginx smooth weighted round-robin sequence (weights 2 and 1 give
	// A B A A B A …) from a table built on Update; above that it uses the
	// lock-free static stride scheduler of grpc, with weights clamped to
	// [0.01, 10] × the mean.
	WeightedRoundRobin Strategy = "weighted_round_robin"
	// Random picks uniformly.
	Random Strategy = "random"
	// WeightedRandom picks with probability proportional to Weight, in O(1)
	// with Vose's alias method.
	WeightedRandom Strategy = "weighted_random"
	// LeastRequest samples two distinct instances (power of two choices)
	// and takes the one with fewer requests in flight (weighted: in-flight
	// ÷ weight). With WithChoices(k) ≥ the number of instances it scans
	// them all: the exact least-connection rule. It needs Done to be called.
	LeastRequest Strategy = "least_request"
	// P2CEWMA samples two instances and takes the one with the lower
	// peak-EWMA latency × (in-flight + 1), decaying with τ = 10 s (Finagle,
	// Linkerd). With equal weights the two are distinct; with unequal ones
	// they are drawn by weight, in-flight counts ÷ relative weight, and
	// loads within 3× of each other are compared by a fair toss, so an
	// idle service splits by weight. It is the default; it needs Done (or
	// Finish, which measures the latency itself) to be called.
	P2CEWMA Strategy = "p2c_ewma"
	// ConsistentHash maps PickOptions.Key onto a hash ring with per-host
	// virtual nodes (xxhash), so a key sticks to one instance and only
	// ≈1/N of the keys move when an instance joins or leaves. Optional
	// bounded load (WithBoundedLoad). Without a key it picks at random.
	ConsistentHash Strategy = "consistent_hash"
	// Maglev maps PickOptions.Key through a Maglev lookup table (Eisenbud
	// et al., NSDI'16): O(1) lookups and near-perfect balance, at the cost
	// of ≈2× the key movement of a ring. Without a key it picks at random.
	Maglev Strategy = "maglev"
)

// DefaultStrategy is used when New gets no WithStrategy.
const DefaultStrategy = P2CEWMA

var strategies = []Strategy{RoundRobin, WeightedRoundRobin, Random, WeightedRandom, LeastRequest, P2CEWMA, ConsistentHash, Maglev}

// Strategies lists every known strategy.
func Strategies() []Strategy { return append([]Strategy(nil), strategies...) }

// ParseStrategy returns the strategy with the given name, or an error
// wrapping errUnknownStrategy.
func ParseStrategy(name string) (Strategy, error) {
	for _, s := range strategies {
		if string(s) == name {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w %q (known: %v)", errUnknownStrategy, name, strategies)
}

// Defaults of the tunable strategies.
const (
	// defaultVirtualNodes is the number of ring points of an instance with
	// the default weight (100); an instance gets VirtualNodes × Weight/100
	// points (at least 1). 1000 keeps the most loaded of 100 instances
	// within ≈10 % of the mean (docs/research/load-balancing.md §8.3: 100 points give
	// 1.22, 1000 give 1.08).
	defaultVirtualNodes = 1000
	// defaultDecay is the peak-EWMA time constant τ (Finagle, Linkerd:
	// 10 s; 1 s was measured to react worse, docs/research/load-balancing.md §8.5).
	defaultDecay = 10 * time.Second
	// defaultChoices is the number of instances least_request samples.
	defaultChoices = 2
)

// Option configures a Selector.
type Option func(*config)

type config struct {
	strategy Strategy
	filters  []Filter
	zone     string // WithLocality
	region   string // WithRegion
	// overprovision and panicPct tune the locality tiers
	// (WithOverprovisioning, WithPanicThreshold).
	overprovision float64
	panicPct      int
	vnodes        int
	bound         float64 // 0 = off; else c ≥ 1
	maglevSize    uint64  // 0 = automatic
	choices       int
	decay         time.Duration
	penaltyNs     float64
	rng           randSource // tests: deterministic randomness
	clock         func() int64
	smoothLimit   int
	slow          SlowStart
	split         *Split
	// inflightBound: a pick counts in flight for at most this long.
	inflightBound time.Duration
}

func defaultConfig() config {
	return config{
		strategy: DefaultStrategy, vnodes: defaultVirtualNodes, choices: defaultChoices,
		decay: defaultDecay, smoothLimit: 64, slow: defaultSlowStart,
		inflightBound: DefaultInflightBound,
		overprovision: defaultOverprovisioning, panicPct: defaultPanicThreshold,
	}
}

// WithStrategy selects the algorithm. An unknown name makes New fail.
func WithStrategy(s Strategy) Option { return func(c *config) { c.strategy = s } }

// WithFilters adds filters, applied in order on every Update before the
// strategy sees the instances.
func WithFilters(f ...Filter) Option {
	return func(c *config) { c.filters = append(c.filters, f...) }
}

// WithVirtualNodes sets the ring points of an instance of weight 100 for
// ConsistentHash (default defaultVirtualNodes). Memory is ≈12 bytes per
// point; a ring holds at most 200,000 points (2.4 MB), and above that the
// points per instance shrink in proportion (20 each at 10,000 instances).
func WithVirtualNodes(n int) Option { return func(c *config) { c.vnodes = n } }

// WithBoundedLoad enables consistent hashing with bounded loads
// (Mirrokni et al.) for ConsistentHash and Maglev: an instance with more
// than ⌈c × (in-flight total + 1) / N⌉ requests in flight is skipped and
// the key walks on to the next one. c must be ≥ 1; 1.25 is the usual
// value (HAProxy, Envoy recommend 1.25–2). It needs Done to be called.
func WithBoundedLoad(c float64) Option { return func(c2 *config) { c2.bound = c } }

// withMaglevTableSize sets the Maglev table size; it must be prime. The
// default is 65537 up to 655 instances and 655373 above, keeping the
// table ≥ 100 × N as the Maglev paper advises.
func withMaglevTableSize(m uint64) Option { return func(c *config) { c.maglevSize = m } }

// WithChoices sets how many instances LeastRequest compares (default 2,
// clamped to [2, 10] as in gRPC A48). When it is ≥ the number of
// instances, every instance is compared.
func WithChoices(k int) Option { return func(c *config) { c.choices = k } }

// withDecay sets the peak-EWMA time constant τ of P2CEWMA (default 10 s).
func withDecay(tau time.Duration) Option { return func(c *config) { c.decay = tau } }

// WithInflightBound bounds how long a pick whose Done is never called
// counts as a request in flight for LeastRequest, P2CEWMA and bounded
// loads (default DefaultInflightBound, about 8.6 s). d is rounded down to
// a power of two nanoseconds, and a pick stops counting between d/2 and
// d after it, Done or not: counts are kept per epoch of d/2 (see
// docs/selector.md). Raise it, up to an hour, when calls longer than a
// few seconds (streams, long polls) are to count for their whole length.
func WithInflightBound(d time.Duration) Option { return func(c *config) { c.inflightBound = d } }

func (c *config) validate() error {
	if _, err := ParseStrategy(string(c.strategy)); err != nil {
		return err
	}
	if c.vnodes < 1 || c.vnodes > 1<<16 {
		return fmt.Errorf("%w: virtual nodes %d (want 1 to 65536)", errInvalidOption, c.vnodes)
	}
	if c.bound != 0 && !(c.bound >= 1 && c.bound <= 100) {
		return fmt.Errorf("%w: bounded load %v (want 1 to 100)", errInvalidOption, c.bound)
	}
	if c.maglevSize != 0 && (c.maglevSize < 7 || c.maglevSize > 1<<26 || !isPrime(c.maglevSize)) {
		return fmt.Errorf("%w: maglev table size %d (want a prime from 7 to 2^26)", errInvalidOption, c.maglevSize)
	}
	if c.inflightBound < time.Millisecond || c.inflightBound > time.Hour {
		return fmt.Errorf("%w: in-flight bound %v (want 1ms to 1h)", errInvalidOption, c.inflightBound)
	}
	if c.decay <= 0 {
		return fmt.Errorf("%w: decay %v (want > 0)", errInvalidOption, c.decay)
	}
	if !(c.overprovision >= 1 && c.overprovision <= 100) {
		return fmt.Errorf("%w: overprovisioning %v (want 1 to 100)", errInvalidOption, c.overprovision)
	}
	if c.panicPct < 0 || c.panicPct > 100 {
		return fmt.Errorf("%w: panic threshold %d%% (want 0 to 100)", errInvalidOption, c.panicPct)
	}
	c.choices = min(max(c.choices, 2), 10)
	return c.split.validate()
}

func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
