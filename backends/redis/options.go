package redis

import (
	"fmt"
	"strings"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// Layout selects how instances are stored.
type Layout string

const (
	// LayoutHash is the default: atomic scripts, an index, a change log.
	LayoutHash Layout = "hash"
	// LayoutKeys is the article-compatible String-per-instance layout.
	LayoutKeys Layout = "keys"
)

// Notify says whether a keys-layout watch subscribes to keyspace events.
type Notify string

const (
	NotifyAuto Notify = "auto" // when CONFIG GET shows them enabled
	NotifyOn   Notify = "on"   // always subscribe
	NotifyOff  Notify = "off"  // poll only
)

// maxLinger bounds Options.Linger: longer would keep the keys of services
// that are long gone, and the scripts compute in float64 milliseconds.
const maxLinger = 7 * 24 * time.Hour

// Options configure a Driver. The zero value means the defaults.
type Options struct {
	Layout Layout // default LayoutHash
	// Prefix is the first key segment: "roster" (hash) or "service" (keys)
	// by default. A ':' separates it from the rest, so no two prefixes can
	// share keys: the hash layout's prefix may not contain '{' or '}' (the
	// service's hash tag ends it) and the keys layout's may not contain
	// ':' (see the keys layout's key grammar in the package doc).
	Prefix string

	Sweep  time.Duration // hash: longest time between two sweeps (default 1s)
	Quiet  time.Duration // hash: relist after this long without log entries (default 10s)
	MaxLen int64         // hash: approximate cap of each service's change log (default 1000)
	// Linger (hash) is how long a service's keys outlive its last
	// instance, and how long its change log keeps an entry (default 5m,
	// at most 7 days).
	Linger time.Duration

	Poll   time.Duration // keys: relist period of a watch (default 1s)
	Notify Notify        // keys: keyspace-notification hints (default auto)
}

func (o *Options) defaults() error {
	if o.Layout == "" {
		o.Layout = LayoutHash
	}
	switch o.Layout {
	case LayoutHash:
		if o.Prefix == "" {
			o.Prefix = "roster"
		}
		if strings.ContainsAny(o.Prefix, "{}") {
			return fmt.Errorf("%w: redis: prefix %q must not contain { or } (the hash tag is added per service)", driver.ErrInvalid, o.Prefix)
		}
	case LayoutKeys:
		if o.Prefix == "" {
			o.Prefix = "service"
		}
		// Keys are prefix:service:address, read back by splitting at ':'.
		// A ':' inside the prefix would make two tenants' key spaces
		// overlap: under prefix "svc", the keys of prefix "svc:staging"
		// read as a service "staging", and a registration of "staging"
		// at "api:443" lands in the other tenant's service "api".
		if strings.Contains(o.Prefix, ":") {
			return fmt.Errorf("%w: redis: prefix %q must not contain ':' with layout=keys (it separates prefix, service and address; prefixes such as svc and svc:staging would overlap)", driver.ErrInvalid, o.Prefix)
		}
	default:
		return fmt.Errorf("%w: redis: layout %q (want hash or keys)", driver.ErrInvalid, o.Layout)
	}
	if o.Sweep == 0 {
		o.Sweep = time.Second
	}
	if o.Quiet == 0 {
		o.Quiet = 10 * time.Second
	}
	if o.MaxLen == 0 {
		o.MaxLen = 1000
	}
	if o.Linger == 0 {
		o.Linger = 5 * time.Minute
	}
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Notify == "" {
		o.Notify = NotifyAuto
	}
	switch {
	case o.Sweep < 0 || o.Quiet < 0 || o.Poll < 0 || o.MaxLen < 0:
		return fmt.Errorf("%w: redis: negative sweep, quiet, poll or maxlen", driver.ErrInvalid)
	case o.Linger < time.Millisecond || o.Linger > maxLinger:
		return fmt.Errorf("%w: redis: linger %v (want 1ms to %v)", driver.ErrInvalid, o.Linger, maxLinger)
	case o.Notify != NotifyAuto && o.Notify != NotifyOn && o.Notify != NotifyOff:
		return fmt.Errorf("%w: redis: notify %q (want auto, on or off)", driver.ErrInvalid, o.Notify)
	}
	return nil
}
