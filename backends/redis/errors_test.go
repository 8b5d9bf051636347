package redis_test

import (
	"errors"
	"testing"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// A reply refusing the request itself — an ACL without the right, a key
// of ours that holds foreign data of another type — is ErrInvalid, not
// ErrUnavailable: no retry can make it succeed.
func TestServerRefusalIsInvalid(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := t.Context()
	if err := rdb.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read", "+@connection").Err(); err != nil {
		t.Fatal(err)
	}
	// Foreign data of the wrong type where the hash layout keeps the
	// index of service "taken".
	if err := rdb.HSet(ctx, "roster:{taken}:idx", "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, url, service string }{
		{"hash, read-only user", "redis://reader:pw@" + srv.Addr(), "s"},
		{"keys, read-only user", "redis://reader:pw@" + srv.Addr() + "?layout=keys", "s"},
		{"hash, foreign hash in the index's place", "redis://" + srv.Addr(), "taken"},
	} {
		r := open(t, c.url)
		_, err := r.Register(ctx, registry.Instance{ID: "i-1", Service: c.service, Address: "127.0.0.1:1"})
		if !errors.Is(err, registry.ErrInvalid) || errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("%s: Register = %v, want ErrInvalid (not ErrUnavailable)", c.name, err)
		}
	}
}
