package etcd

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// portCheck finds an etcd:// URL pointed at endpoints that speak TLS
// only: gRPC sees its connections closed and waits for the request
// timeout, which reads as an outage retried forever. On a failed call
// (wrap), one probe per endpoint (driver.CheckPlain) tells them apart
// and the mix-up is ErrInvalid naming it. A connection that became
// ready, or a probe that reached the endpoints and found them plain,
// ends the checks; one probe runs at a time. (TLS on a plain port is
// found at Open, by checkTLS.)
type portCheck struct {
	endpoints []string // nil: no check (TLS is on, or the client is not ours)
	ok        atomic.Bool
	probing   sync.Mutex
}

func (p *portCheck) sound() {
	if !p.ok.Load() {
		p.ok.Store(true)
	}
}

// mixup probes the endpoints unless already known sound, and returns
// the ErrInvalid of the first that speaks TLS only, or nil.
func (p *portCheck) mixup() error {
	if p.endpoints == nil || p.ok.Load() || !p.probing.TryLock() {
		return nil
	}
	defer p.probing.Unlock()
	reachedAll := true
	for _, ep := range p.endpoints {
		_, host, _ := strings.Cut(ep, "://")
		reached, err := driver.CheckPlain(context.Background(), host, time.Second)
		if err != nil {
			return err
		}
		reachedAll = reachedAll && reached
	}
	if reachedAll {
		p.ok.Store(true)
	}
	return nil
}
