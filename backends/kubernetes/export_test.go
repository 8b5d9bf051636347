package kubernetes

import "context"

// Probe runs the watchdog's probe of the driver's current generation of
// informers (nil before the first Watch: no error).
func (d *Driver) Probe(ctx context.Context) error {
	d.mu.Lock()
	g := d.inf
	d.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.probe(ctx)
}
