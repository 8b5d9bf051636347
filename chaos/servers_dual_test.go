package chaos

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/dual" // dual://
)

// dualServer is a migration in progress, dual://?old=<Redis>&new=<etcd>,
// each side a private server of its own.
type dualServer struct{ sides [2]server } // old, new

func startDual(t *testing.T) server {
	return &dualServer{[2]server{startRedis("")(t), startEtcd(t)}}
}

func dualURL(old, new string) string {
	return "dual://?old=" + url.QueryEscape(old) + "&new=" + url.QueryEscape(new)
}

func (s *dualServer) url() string { return dualURL(s.sides[0].url(), s.sides[1].url()) }

// link cuts the client off from both sides at once.
func (s *dualServer) link() (string, func(bool), func(), error) {
	oldURL, oldCut, oldClose, err := s.sides[0].link()
	if err != nil {
		return "", nil, nil, err
	}
	newURL, newCut, newClose, err := s.sides[1].link()
	if err != nil {
		oldClose()
		return "", nil, nil, err
	}
	cut := func(ok bool) { oldCut(ok); newCut(ok) }
	return dualURL(oldURL, newURL), cut, func() { oldClose(); newClose() }, nil
}

func (s *dualServer) crash() error { return errors.Join(s.sides[0].crash(), s.sides[1].crash()) }

func (s *dualServer) startEmpty(ctx context.Context) error {
	return errors.Join(s.sides[0].startEmpty(ctx), s.sides[1].startEmpty(ctx))
}

func (s *dualServer) restart(ctx context.Context) error {
	return errors.Join(s.sides[0].restart(ctx), s.sides[1].restart(ctx))
}

// dualFaults: either side lost, the instance faults and a partition from
// both sides.
var dualFaults = []fault{
	{"old-lost", sideLost(0)},
	{"new-lost", sideLost(1)},
	{"kill-instance", (*fixture).killInstance},
	{"partition", (*fixture).partition},
}

var sideNames = [2]string{"old", "new"}

// sideLost kills one side's server, leaves it down for the outage and
// starts it again empty. The other side answers throughout, so the
// client's view must never go stale (backends/dual: a watch fails only
// when both sides fail); the lost side must list every instance again
// within the recovery bound of its return (the dual driver writes a down
// side again on the next heartbeat).
func sideLost(i int) func(fx *fixture, t *testing.T, p *phase) {
	return func(fx *fixture, t *testing.T, p *phase) {
		side := fx.srv.(*dualServer).sides[i]
		sawStale := fx.watchStale(p)
		if err := side.crash(); err != nil {
			t.Fatal(err)
		}
		p.event("%s side killed; down for %v", sideNames[i], outage)
		time.Sleep(outage)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.event("starting the %s side, empty", sideNames[i])
		if err := side.startEmpty(ctx); err != nil {
			t.Fatal(err)
		}
		ready := p.event("%s side ready", sideNames[i])
		lone := *fx // the same instances, looked up on the lost side alone
		lone.srv = side
		lone.checkRecovery(t, p, ready)
		if sawStale() {
			t.Errorf("the client's view went stale while the %s side was down: the other side answered", sideNames[i])
		}
		fx.mustConverge(t, p)
	}
}
