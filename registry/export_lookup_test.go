package registry

import "time"

// SetLookupTimeout replaces DefaultLookupTimeout for r, so that a test
// need not wait 15s for it.
func SetLookupTimeout(r *Registry, d time.Duration) { r.lookupTimeout = d }
