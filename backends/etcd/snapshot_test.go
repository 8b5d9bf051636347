package etcd

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/registry/driver"
)

// TestSnapshotMergeMatchesFullSort applies random puts and deletes to a
// stream and checks each merged snapshot against the state sorted in
// full, as after a list.
func TestSnapshotMergeMatchesFullSort(t *testing.T) {
	s := &stream{service: "svc", sp: "/p/svc/", state: map[string]driver.Instance{}}
	rng := rand.New(rand.NewPCG(1, 2))
	rev := int64(1)
	for round := range 300 {
		var evs []*clientv3.Event
		for range 1 + rng.IntN(20) {
			id := fmt.Sprintf("i%03d", rng.IntN(200))
			rev++
			ev := &clientv3.Event{Kv: &mvccpb.KeyValue{Key: []byte(s.sp + id), ModRevision: rev}}
			if rng.IntN(3) == 0 {
				ev.Type = clientv3.EventTypeDelete
			} else {
				ev.Kv.Value = fmt.Appendf(nil, `{"address":"10.0.0.1:%d"}`, 1+rng.IntN(60000))
			}
			evs = append(evs, ev)
		}
		s.apply(evs)
		got := s.snapshot().Instances
		var want []driver.Instance
		for _, id := range slices.Sorted(maps.Keys(s.state)) {
			want = append(want, s.state[id])
		}
		if !slices.EqualFunc(got, want, func(a, b driver.Instance) bool { return a.ID == b.ID && a.Address == b.Address }) {
			t.Fatalf("round %d: merged snapshot %v, want %v", round, got, want)
		}
	}
	if len(s.changed) != 0 {
		t.Fatalf("%d changed IDs left after the last snapshot", len(s.changed))
	}
}
