package backend

import (
	"context"
	"crypto/tls"
	"sync"
	"sync/atomic"
	"time"
)

// PortCheck finds a client whose TLS setting does not match its
// server's port — TLS to a plain port (the handshake waits for an answer
// that never comes, or is hung up on) or plain to a TLS-only port
// (connections closed) — which a client library reports only as an
// outage, retried forever. A driver calls Diagnose after a failed call:
// one probe per address (CheckTLS or CheckPlain) tells the two apart and
// returns ErrInvalid naming the mix-up. Sound, called when the server
// answered, or a probe that reached every address and found the
// protocols match, ends the checks; while a server is down each failure
// costs one refused dial, and one probe runs at a time. A mix-up found
// is returned by Known for the next few seconds, so that calls fail at
// once instead of after another dial timeout each; then the addresses
// are probed again, so a server reconfigured meanwhile is found.
//
// The zero PortCheck (no Addrs) checks nothing.
type PortCheck struct {
	Addrs []string    // host:port of the servers to probe
	TLS   *tls.Config // the client's: nil for plain TCP

	sound   atomic.Bool
	probing sync.Mutex
	found   atomic.Pointer[portMixup]
}

// mixupHold is how long Known returns a mix-up found.
const mixupHold = 5 * time.Second

type portMixup struct {
	err error
	at  time.Time
}

// Sound records that a server answered: client and port speak the same
// protocol, and no probe is needed when later calls fail.
func (p *PortCheck) Sound() {
	if !p.sound.Load() {
		p.sound.Store(true)
	}
}

// Known returns the mix-up Diagnose found in the last few seconds, or nil.
func (p *PortCheck) Known() error {
	if m := p.found.Load(); m != nil && time.Since(m.at) < mixupHold {
		return m.err
	}
	return nil
}

// Diagnose probes the addresses unless the protocols are known to match
// or another probe runs, and returns the ErrInvalid of the first mix-up,
// or nil.
func (p *PortCheck) Diagnose() error {
	if len(p.Addrs) == 0 || p.sound.Load() || !p.probing.TryLock() {
		return nil
	}
	defer p.probing.Unlock()
	reachedAll := true
	for _, addr := range p.Addrs {
		reached, err := p.probe(addr)
		if err != nil {
			p.found.Store(&portMixup{err: err, at: time.Now()})
			return err
		}
		reachedAll = reachedAll && reached
	}
	if reachedAll {
		p.sound.Store(true)
	}
	return nil
}

func (p *PortCheck) probe(addr string) (reached bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if p.TLS != nil {
		return CheckTLS(ctx, addr, p.TLS, time.Second)
	}
	return CheckPlain(ctx, addr, time.Second)
}
