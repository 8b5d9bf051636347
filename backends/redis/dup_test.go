package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// In the keys layout, records that claim a live instance's ID under keys
// that sort first lose to it, however they are written: without a TTL,
// or with one under a key that is not their address's. A record that
// imitates Roster exactly (its own address's key, a TTL) cannot be told
// from a move: the first is served. Each conflict is logged once.
func TestKeysDuplicateIDStanding(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	log := logbuf.Default(t)
	ctx := t.Context()
	r, err := registry.Open(ctx, "redis://"+srv.Addr()+"?layout=keys&notify=off")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	value := func(addr, id string) string {
		return fmt.Sprintf(`{"addr":%q,"weight":"65535","metadata":"roster_id=%s"}`, addr, id)
	}
	for n, c := range []struct {
		name string
		key  string // after the service's prefix
		addr string
		ttl  time.Duration
		wins bool
	}{
		{"no TTL, own key", "10.6.6.6:1", "10.6.6.6:1", 0, false},
		{"TTL, a key not its address's", "10.0.0.0:1", "10.6.6.6:1", time.Minute, false},
		{"no TTL, a key not its address's", "0", "10.6.6.6:1", 0, false},
		{"TTL, own key: an imitation", "10.6.6.6:1", "10.6.6.6:1", time.Minute, true},
	} {
		svc := fmt.Sprintf("dup-%d", n)
		l, err := r.Register(ctx, registry.Instance{Service: svc, Address: "10.7.0.1:80"})
		if err != nil {
			t.Fatal(err)
		}
		id := l.Instance().ID
		if err := rdb.Set(ctx, "service:"+svc+":"+c.key, value(c.addr, id), c.ttl).Err(); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the conflict is logged once, not per read
			s, err := r.Lookup(ctx, svc)
			got, ok := s.Find(id)
			if err != nil || !ok || (got.Address == c.addr) != c.wins {
				t.Errorf("%s: Lookup = %+v, %v; want the foreign record served: %v", c.name, s.Instances, err, c.wins)
			}
		}
		if n := strings.Count(log.String(), "id="+id); n != 1 {
			t.Errorf("%s: %d log lines name %s, want 1: %s", c.name, n, id, log.String())
		}
	}
}
