package chaos

import (
	"fmt"
	"time"
)

// The suite runs with go test, against the test servers it starts itself
// (scripts/test.sh installs them):
//
//	go test -race -count=1 -parallel 4 -v ./chaos                     # every fault on every backend, 3 runs each
//	ROSTER_CHAOS_REPEAT=8 go test -race -count=1 -run 'TestChaos/etcd/partition' -v ./chaos
//
// and ends with this table: per backend and fault, the runs, the calls
// made while the fault lasted and those that failed (the contract: none),
// and, after a registry restart, how long until every instance was listed
// again (the contract: within TTL + 1s).
func Example_table() {
	var sum tally
	for _, recovery := range []time.Duration{1200 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond} {
		p := &phase{recovery: recovery}
		p.calls[0].Add(400) // through middleware.Client
		p.calls[1].Add(380) // through contrib/rosterhttp
		sum.add("etcd", "restart-empty", p)
	}
	p := &phase{recovery: -1} // a partition restarts nothing
	p.calls[0].Add(900)
	p.calls[1].Add(870)
	sum.add("consul", "partition", p)
	fmt.Print(sum.table())
	// Output:
	// backend     fault            runs    calls failed  recovery min / median / max
	// etcd        restart-empty       3     2340      0  0.90s / 1.20s / 1.50s
	// consul      partition           1     1770      0  -
}
