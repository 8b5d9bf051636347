package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/redistest"
)

// Topology faults: the registry's own cluster changes under load.
const (
	// slowBy is how late a slow registry answers every request.
	slowBy = 2 * time.Second
	// slowFor is how long the registry stays slow, an instance killed
	// and replaced meanwhile.
	slowFor = 10 * time.Second
	// electionTimeout bounds the wait for a new etcd leader or a promoted
	// Redis replica (a harness deadline; recovery is measured from it).
	electionTimeout = 30 * time.Second
)

// TestChaosTopology runs the topology faults under load on every path,
// each one ROSTER_CHAOS_REPEAT times: the etcd leader killed in a
// 3-member cluster, a Redis Sentinel failover, and a registry (etcd and
// Redis) that answers every request 2s late.
func TestChaosTopology(t *testing.T) {
	n := repeats(t)
	var sum tally
	t.Cleanup(func() {
		t.Logf("chaos topology: %d run(s) of each fault, TTL %v, %d callers on each of %d paths every %v\n%s",
			n, ttl, callersPerKind, len(kinds), pace, sum.topologyTable())
	})
	for _, b := range topologies {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			srv, faults := b.start(t)
			fx := newFixture(t, srv)
			fx.tally = func(fault string, p *phase) { sum.add(b.name, fault, p) }
			for rep := 1; rep <= n && !fx.broken; rep++ {
				for _, f := range faults {
					t.Run(fmt.Sprintf("%s-%d", f.name, rep), func(t *testing.T) { fx.run(t, f) })
					if fx.broken {
						t.Errorf("stopping after a harness failure in %s-%d", f.name, rep)
						break
					}
				}
			}
		})
	}
}

var topologies = []struct {
	name  string
	start func(t *testing.T) (server, []fault)
}{
	{"etcd-cluster", startEtcdCluster},
	{"redis-sentinel", startSentinel},
	{"redis-slow", startSlowRedis},
}

// ---- etcd: a 3-member cluster ----

// etcdCluster is a 3-member embedded cluster; the client reaches it
// through a Link and a slow link in front of it.
type etcdCluster struct {
	etcdServer
	slow *slowLink
}

func startEtcdCluster(t *testing.T) (server, []fault) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Members: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	s := &etcdCluster{etcdServer: etcdServer{c}, slow: &slowLink{}}
	return s, []fault{
		{"leader-killed", s.leaderKilled},
		{"slow-registry", func(fx *fixture, t *testing.T, p *phase) { fx.slowRegistry(t, p, s.slow) }},
	}
}

func (s *etcdCluster) link() (string, func(bool), func(), error) {
	return s.slow.wrap(s.etcdServer.link())
}

// leaderKilled stops the leader (its client connections cut first), waits
// for the others to elect a new one, and starts the old leader again.
func (s *etcdCluster) leaderKilled(fx *fixture, t *testing.T, p *phase) {
	old := s.c.Leader()
	if old < 0 {
		t.Fatal("the cluster has no leader")
	}
	if err := s.c.StopMember(old); err != nil {
		t.Fatal(err)
	}
	p.event("leader (member %d) killed", old)
	deadline := time.Now().Add(electionTimeout)
	for s.c.Leader() < 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no new leader %v after member %d was killed", electionTimeout, old)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ready := p.event("member %d elected leader", s.c.Leader())
	fx.checkRecovery(t, p, ready)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.c.StartMember(ctx, old); err != nil {
		t.Fatal(err)
	}
	p.event("member %d started again", old)
	fx.mustConverge(t, p)
}

// ---- Redis: a master, a replica and a Sentinel ----

type sentinelServer struct {
	f *redistest.Failover
}

func startSentinel(t *testing.T) (server, []fault) {
	s := &sentinelServer{redistest.StartFailover(t)}
	return s, []fault{{"failover", s.failover}}
}

func (s *sentinelServer) url() string {
	return "redis+sentinel://" + s.f.Sentinel.Addr() + "/0?master=" + s.f.Name
}

// link is the instances' URL: the client reaches the master Sentinel
// names, which no proxy in front of the Sentinel would cut.
func (s *sentinelServer) link() (string, func(bool), func(), error) {
	return s.url(), func(bool) {}, func() {}, nil
}

var errTopologyOnly = errors.New("chaos: this server runs the topology faults only")

func (s *sentinelServer) crash() error                     { return errTopologyOnly }
func (s *sentinelServer) startEmpty(context.Context) error { return errTopologyOnly }
func (s *sentinelServer) restart(context.Context) error    { return errTopologyOnly }

// master returns the server Sentinel names master, and the other one.
func (s *sentinelServer) master() (master, replica *redistest.Server, err error) {
	c := s.f.Sentinel.Client()
	defer c.Close()
	addr, err := c.Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.f.Name).StringSlice()
	if err != nil || len(addr) != 2 {
		return nil, nil, fmt.Errorf("sentinel: master of %s: %v %v", s.f.Name, addr, err)
	}
	switch addr[1] {
	case strconv.Itoa(s.f.Master.Port()):
		return s.f.Master, s.f.Replica, nil
	case strconv.Itoa(s.f.Replica.Port()):
		return s.f.Replica, s.f.Master, nil
	}
	return nil, nil, fmt.Errorf("sentinel names %v master, neither server", addr)
}

// failover kills the master (SIGKILL), waits until Sentinel has promoted
// the replica, then starts the old master again, which Sentinel turns
// into a replica of the new one, and waits until it is in sync.
func (s *sentinelServer) failover(fx *fixture, t *testing.T, p *phase) {
	old, next, err := s.master()
	if err != nil {
		t.Fatal(err)
	}
	old.Kill()
	p.event("master %s killed", old.Addr())
	deadline := time.Now().Add(electionTimeout)
	for {
		if m, _, err := s.master(); err == nil && m == next {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel promoted no replica %v after the master was killed", electionTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ready := p.event("Sentinel names %s master", next.Addr())
	fx.checkRecovery(t, p, ready)
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	p.event("old master started again")
	role, err := s.waitInSync(old)
	if err != nil {
		t.Fatal(err)
	}
	p.event("old master in sync, %s", role)
	fx.mustConverge(t, p)
}

// waitInSync waits until r and the other server form one master and one
// replica in sync again, so that the next failover promotes a replica
// holding the data. Usually r is that replica. On a loaded machine
// Sentinel may fail over once more, back to r: r is then the master,
// named so by Sentinel, with the other server online as its replica.
// The next failover starts from whichever is master.
func (s *sentinelServer) waitInSync(r *redistest.Server) (role string, err error) {
	c := r.Client()
	defer c.Close()
	deadline := time.Now().Add(electionTimeout)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") &&
			strings.Contains(info, "master_sync_in_progress:0") {
			return "as a replica", nil
		}
		if err == nil && strings.Contains(info, "role:master") && strings.Contains(info, "connected_slaves:1") &&
			strings.Contains(info, ",state=online,") {
			if m, _, merr := s.master(); merr == nil && m == r {
				return "as the master again (Sentinel failed over back to it)", nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s not in sync with the master %v after its restart: %v\n%s", r.Addr(), electionTimeout, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- a slow registry ----

// slowRedis is a Redis server (hash layout) reached by the client through
// a slow link.
type slowRedis struct {
	*redisServer
	slow *slowLink
}

func startSlowRedis(t *testing.T) (server, []fault) {
	s := &slowRedis{&redisServer{s: redistest.Start(t)}, &slowLink{}}
	return s, []fault{{"slow-registry", func(fx *fixture, t *testing.T, p *phase) { fx.slowRegistry(t, p, s.slow) }}}
}

func (s *slowRedis) link() (string, func(bool), func(), error) {
	return s.slow.wrap(s.redisServer.link())
}

// slowRegistry makes the registry answer every request of the client
// slowBy late for slowFor, kills an instance and starts a replacement
// meanwhile, and requires the client to pick from exactly the live
// instances before the registry is fast again.
func (fx *fixture) slowRegistry(t *testing.T, p *phase, l *slowLink) {
	l.set(slowBy)
	defer l.set(0)
	until := p.event("every answer to the client %v late, for %v", slowBy, slowFor).Add(slowFor)
	probe := make(chan string, 1)
	go func() { probe <- l.probe(fx) }()
	i := fx.victim % len(fx.insts)
	fx.victim++
	fx.insts[i].kill()
	p.event("instance %s killed", fx.insts[i].addr)
	fx.replace(t, p, i)
	fx.mustConverge(t, p)
	time.Sleep(time.Until(until))
	if msg := <-probe; msg != "" {
		t.Error(msg)
	}
	l.set(0)
	p.event("registry answers on time again")
	fx.mustConverge(t, p)
}

// topologyTable formats the tally's rows in the order of topologies.
func (ta *tally) topologyTable() string {
	ta.mu.Lock()
	var keys [][2]string
	for k := range ta.rows {
		keys = append(keys, k)
	}
	ta.mu.Unlock()
	slices.SortFunc(keys, func(a, b [2]string) int { return cmp.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
	return ta.tableOf(keys)
}
