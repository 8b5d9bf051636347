package consul

import (
	"context"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// diagnoseTLS is wrap's second look at a failure below HTTP over HTTPS:
// one handshake of its own (driver.CheckTLS) finds a misconfiguration
// that the HTTP client reports only as a broken connection — TLS 1.3
// delivers the agent's refusal of the client certificate after the
// handshake, and HTTP/2 drops it. It returns that ErrInvalid, or nil.
// Once a handshake finds the setup sound it is not repeated; while the
// agent is down each failure costs one refused dial.
func (d *Driver) diagnoseTLS() error {
	if !d.o.TLS || d.tlsChecked.Load() || len(d.transports) == 0 {
		return nil
	}
	cfg := d.transports[0].TLSClientConfig
	if cfg == nil {
		return nil
	}
	cfg = cfg.Clone()
	// HTTP/2: the agent speaks first (its settings), so an accepted
	// client certificate is known at once rather than after the wait.
	cfg.NextProtos = []string{"h2", "http/1.1"}
	ctx, cancel := context.WithTimeout(d.life, 2*time.Second)
	defer cancel()
	reached, err := driver.CheckTLS(ctx, d.o.Address, cfg, time.Second)
	d.tlsChecked.Store(reached && err == nil)
	return err
}
