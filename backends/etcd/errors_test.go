package etcd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// A request the server refuses (a lease TTL past its maximum, a value past
// its request size) is ErrInvalid: retrying it cannot succeed. Before, it
// was ErrUnavailable, and the lease retried it forever.
func TestServerRefusalIsInvalid(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	big := func(n int) registry.Instance {
		return registry.Instance{ID: "big", Service: "svc", Address: "127.0.0.1:1",
			Metadata: map[string]string{"k": strings.Repeat("x", n)}}
	}
	const tooLong = 9_100_000_000 * time.Second // etcd's maximum is 9,000,000,000s
	for name, call := range map[string]func() error{
		"lease TTL past 9e9s": func() error {
			_, err := d.Register(t.Context(), registry.Instance{ID: "a", Service: "svc", Address: "127.0.0.1:1"}, tooLong)
			return err
		},
		"1.6 MiB value (the server's limit)": func() error { _, err := d.Register(t.Context(), big(1600<<10), 10*time.Second); return err },
		"2 MiB value (the client's limit)":   func() error { _, err := d.Register(t.Context(), big(2<<20), 10*time.Second); return err },
	} {
		if err := call(); !errors.Is(err, registry.ErrInvalid) || errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrInvalid (not ErrUnavailable)", name, err)
		}
	}
	// Through the registry, the TTL is refused by validation, naming it.
	r := registry.New(d)
	_, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "127.0.0.1:1"}, registry.WithTTL(tooLong))
	var fe *registry.FieldError
	if !errors.As(err, &fe) || fe.Field != "ttl" || !strings.Contains(err.Error(), "maximum") {
		t.Fatalf("Register with a TTL past etcd's maximum = %v, want an error on ttl naming the maximum", err)
	}
}
