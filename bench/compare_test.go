package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/sd"
	"github.com/go-kit/kit/sd/lb"
	kregistry "github.com/go-kratos/kratos/v2/registry"
	kselector "github.com/go-kratos/kratos/v2/selector"
	"github.com/go-kratos/kratos/v2/selector/p2c"
	"github.com/go-kratos/kratos/v2/selector/random"
	"github.com/go-kratos/kratos/v2/selector/wrr"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// The benchmarks are named Benchmark<Algorithm>/impl=<library>/n=<size>
// (parallel ones BenchmarkParallel<Algorithm>/…), so that
// `benchstat -col /impl` puts the libraries side by side.
//
// Every implementation sees the same n instances with the same unequal
// weights (50 + 10 × (i mod 10)), and the done feedback is called after
// every pick, as a user of the library would.

var sizes = []int{10, 100, 1000}

func weight(i int) int { return 50 + 10*(i%10) }

func addr(i int) string { return fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250) }

func rosterSelector(b *testing.B, st selector.Strategy, n int) *selector.Selector {
	s, err := selector.New(selector.WithStrategy(st))
	if err != nil {
		b.Fatal(err)
	}
	snap := registry.Snapshot{Service: "svc"}
	for i := range n {
		snap.Instances = append(snap.Instances, registry.Instance{
			ID: fmt.Sprintf("svc-%04d", i), Service: "svc", Address: addr(i), Weight: uint32(weight(i)),
		})
	}
	s.Update(snap)
	return s
}

func kratosSelector(build kselector.Builder, n int) kselector.Selector {
	s := build.Build()
	nodes := make([]kselector.Node, n)
	for i := range nodes {
		nodes[i] = kselector.NewNode("grpc", addr(i), &kregistry.ServiceInstance{
			ID: fmt.Sprintf("svc-%04d", i), Name: "svc", Version: "v1",
			Metadata:  map[string]string{"weight": strconv.Itoa(weight(i))},
			Endpoints: []string{"grpc://" + addr(i)},
		})
	}
	s.Apply(nodes)
	return s
}

func gokitBalancer(rr bool, n int) lb.Balancer {
	eps := make(sd.FixedEndpointer, n)
	for i := range eps {
		eps[i] = endpoint.Nop
	}
	if rr {
		return lb.NewRoundRobin(eps)
	}
	return lb.NewRandom(eps, 1)
}

// A picker runs one pick and its feedback; i counts the calls of one
// goroutine (the keyed pickers choose their key by it).
type picker func(i int)

func roster(s *selector.Selector, withClock bool) picker {
	ctx := context.Background()
	if withClock {
		// What a caller of P2CEWMA writes: measure the call's latency.
		return func(int) {
			_, done, err := s.Pick(ctx, selector.PickOptions{})
			if err != nil {
				panic(err)
			}
			start := time.Now()
			done.Done(nil, time.Since(start))
		}
	}
	return func(int) {
		_, done, err := s.Pick(ctx, selector.PickOptions{})
		if err != nil {
			panic(err)
		}
		done.Done(nil, time.Millisecond)
	}
}

// rosterFinish is what a caller writes with Done.Finish: the selector
// measures the call's latency on its coarse clock, the caller reads no
// clock. It is the like-for-like comparison with kratos, whose done
// times the call itself.
func rosterFinish(s *selector.Selector) picker {
	ctx := context.Background()
	return func(int) {
		_, done, err := s.Pick(ctx, selector.PickOptions{})
		if err != nil {
			panic(err)
		}
		done.Finish(nil)
	}
}

// rosterKeyed picks with an affinity key, for the hashing strategies:
// 1,024 user IDs in a random order fixed in advance (65,536 draws long,
// so that neither caches nor branch predictors learn a cycle), so the
// benchmark's own random draw is not counted as the selector's.
func rosterKeyed(s *selector.Selector) picker {
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	order := make([]uint16, 1<<16)
	for i := range order {
		order[i] = uint16(r.IntN(len(keys)))
	}
	return func(i int) {
		_, done, err := s.Pick(ctx, selector.PickOptions{Key: keys[order[i&(1<<16-1)]]})
		if err != nil {
			panic(err)
		}
		done.Done(nil, time.Millisecond)
	}
}

func kratos(s kselector.Selector) picker {
	ctx := context.Background()
	return func(int) {
		_, done, err := s.Select(ctx)
		if err != nil {
			panic(err)
		}
		done(ctx, kselector.DoneInfo{})
	}
}

func gokit(b lb.Balancer) picker {
	return func(int) {
		if _, err := b.Endpoint(); err != nil {
			panic(err)
		}
	}
}

type impl struct {
	name string
	make func(b *testing.B, n int) picker
}

// serialOnly lists implementations that are not safe for concurrent use.
// go-kit's lb.NewRandom shares one *rand.Rand without a lock; under
// RunParallel it panics ("index out of range [-1]" in math/rand).
var serialOnly = map[string]bool{"gokit-random": true}

var algorithms = []struct {
	name  string
	impls []impl
}{
	{"P2C", []impl{
		{"roster-p2c_ewma", func(b *testing.B, n int) picker { return roster(rosterSelector(b, selector.P2CEWMA, n), false) }},
		{"roster-p2c_ewma+clock", func(b *testing.B, n int) picker { return roster(rosterSelector(b, selector.P2CEWMA, n), true) }},
		{"roster-p2c_ewma+finish", func(b *testing.B, n int) picker { return rosterFinish(rosterSelector(b, selector.P2CEWMA, n)) }},
		{"roster-least_request", func(b *testing.B, n int) picker { return roster(rosterSelector(b, selector.LeastRequest, n), false) }},
		{"kratos-p2c", func(b *testing.B, n int) picker { return kratos(kratosSelector(p2c.NewBuilder(), n)) }},
	}},
	{"WRR", []impl{
		{"roster-weighted_round_robin", func(b *testing.B, n int) picker {
			return roster(rosterSelector(b, selector.WeightedRoundRobin, n), false)
		}},
		{"kratos-wrr", func(b *testing.B, n int) picker { return kratos(kratosSelector(wrr.NewBuilder(), n)) }},
	}},
	{"Random", []impl{
		{"roster-random", func(b *testing.B, n int) picker { return roster(rosterSelector(b, selector.Random, n), false) }},
		{"kratos-random", func(b *testing.B, n int) picker { return kratos(kratosSelector(random.NewBuilder(), n)) }},
		{"gokit-random", func(b *testing.B, n int) picker { return gokit(gokitBalancer(false, n)) }},
	}},
	// Strategies the peers do not have, measured in the same run so that
	// they can be compared with kratos' p2c and wrr above.
	{"RosterOnly", []impl{
		{"roster-weighted_random", func(b *testing.B, n int) picker { return roster(rosterSelector(b, selector.WeightedRandom, n), false) }},
		{"roster-consistent_hash", func(b *testing.B, n int) picker { return rosterKeyed(rosterSelector(b, selector.ConsistentHash, n)) }},
		{"roster-maglev", func(b *testing.B, n int) picker { return rosterKeyed(rosterSelector(b, selector.Maglev, n)) }},
	}},
	{"RoundRobin", []impl{
		{"roster-round_robin", func(b *testing.B, n int) picker { return roster(rosterSelector(b, selector.RoundRobin, n), false) }},
		{"gokit-roundrobin", func(b *testing.B, n int) picker { return gokit(gokitBalancer(true, n)) }},
	}},
}

func run(b *testing.B, parallel bool) {
	for _, a := range algorithms {
		name := a.name
		if parallel {
			name = "Parallel" + name
		}
		b.Run(name, func(b *testing.B) {
			for _, im := range a.impls {
				if parallel && serialOnly[im.name] {
					continue
				}
				for _, n := range sizes {
					b.Run(fmt.Sprintf("impl=%s/n=%d", im.name, n), func(b *testing.B) {
						pick := im.make(b, n)
						b.ReportAllocs()
						b.ResetTimer()
						if !parallel {
							for i := 0; b.Loop(); i++ {
								pick(i)
							}
							return
						}
						b.RunParallel(func(pb *testing.PB) {
							for i := 0; pb.Next(); i++ {
								pick(i)
							}
						})
					})
				}
			}
		})
	}
}

func BenchmarkPick(b *testing.B) { run(b, false) }

func BenchmarkPickParallel(b *testing.B) { run(b, true) }
