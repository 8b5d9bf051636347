package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/zookeeper" // zk://
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/zktest"
)

const zkRoot = "/roster-chaos"

// zkServer is a private standalone ZooKeeper server. Without its data it
// comes back with its transaction counter at zero, and refuses the
// clients that saw more: the driver replaces such a client
// (docs/backends/zookeeper.md, "A client that cannot come back").
type zkServer struct{ s *zktest.Server }

func startZooKeeper(t *testing.T) server { return &zkServer{zktest.Start(t)} }

func (s *zkServer) url() string { return s.s.URL(zkRoot, "") }

func (s *zkServer) link() (string, func(bool), func(), error) {
	p, err := loopback.NewProxy(s.s.Addr())
	if err != nil {
		return "", nil, nil, err
	}
	cut := func(ok bool) { _ = p.SetConnected(context.Background(), ok) }
	return "zk://" + p.Addr() + zkRoot, cut, func() { p.Close() }, nil
}

// recoveryBound is TTL + 2s. A client that reached the server while it
// started without its data may be refused, and the driver replaces a
// client only once it has been without a session for the session
// timeout (the TTL) + 1s (backends/zookeeper/session.go; the
// docs/backends/zookeeper.md section "A client that cannot come back");
// the lease then registers at its next attempt, within TTL/3. 4.22s after
// ready was measured in 1 of 6 crash-empty runs.
func (s *zkServer) recoveryBound() time.Duration { return ttl + 2*time.Second }

func (s *zkServer) crash() error                         { s.s.Stop(); return nil }
func (s *zkServer) startEmpty(ctx context.Context) error { return s.s.Start(ctx, false) }
func (s *zkServer) restart(ctx context.Context) error    { return s.s.Restart(ctx, true) }

// zkEnsemble is a private 3-member ensemble. Its fault is the loss of a
// member (ensembleFaults): the whole ensemble is never down.
type zkEnsemble struct {
	e      *zktest.Ensemble
	losses int // member-lost runs so far: odd ones lose the leader
}

func startZooKeeperEnsemble(t *testing.T) server {
	return &zkEnsemble{e: zktest.StartEnsemble(t, 3)}
}

func (s *zkEnsemble) url() string { return s.e.URL(zkRoot, "") }

// link puts a proxy in front of each member.
func (s *zkEnsemble) link() (string, func(bool), func(), error) {
	var ps []*loopback.Proxy
	closeAll := func() {
		for _, p := range ps {
			p.Close()
		}
	}
	var addrs []string
	for _, a := range s.e.Addrs() {
		p, err := loopback.NewProxy(a)
		if err != nil {
			closeAll()
			return "", nil, nil, err
		}
		ps = append(ps, p)
		addrs = append(addrs, p.Addr())
	}
	cut := func(ok bool) {
		for _, p := range ps {
			_ = p.SetConnected(context.Background(), ok)
		}
	}
	u := "zk://" + addrs[0] + "," + addrs[1] + "," + addrs[2] + zkRoot
	return u, cut, closeAll, nil
}

var errEnsemble = errors.New("chaos: an ensemble loses members, not its whole self")

func (s *zkEnsemble) crash() error                     { return errEnsemble }
func (s *zkEnsemble) startEmpty(context.Context) error { return errEnsemble }
func (s *zkEnsemble) restart(context.Context) error    { return errEnsemble }

// ensembleFaults: a member lost, with the load on.
var ensembleFaults = []fault{{"member-lost", (*fixture).memberLost}}

// memberLost kills one member of the ensemble (the leader, and a follower
// every other run), leaves it down for the outage and starts it again on
// its data. ZooKeeper sessions are ensemble-wide: every instance must stay
// listed, a session moving to another member within its timeout (the
// TTL; docs/backends/zookeeper.md, "member loss"), so the recovery bound
// counts from the loss, not from a return.
func (fx *fixture) memberLost(t *testing.T, p *phase) {
	s := fx.srv.(*zkEnsemble)
	s.losses++
	i, role := s.e.Leader(), "leader"
	if i < 0 {
		t.Fatal("the ensemble has no leader")
	}
	if s.losses%2 == 0 {
		i, role = (i+1)%len(s.e.Servers), "follower"
	}
	m := s.e.Servers[i]
	m.Stop()
	lost := p.event("member %d (%s) killed; down for %v", i+1, role, outage)
	fx.checkRecovery(t, p, lost)
	time.Sleep(time.Until(lost.Add(outage)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Start(ctx, true); err != nil {
		t.Fatal(fmt.Errorf("member %d back: %w", i+1, err))
	}
	p.event("member %d serving again (%s)", i+1, m.Mode())
	fx.mustConverge(t, p)
}
