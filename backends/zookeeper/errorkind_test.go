package zookeeper_test

import (
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/registry/driver"
)

// ErrorKind classifies the client's real errors: a missing znode is
// ErrNotFound; a refused identity or input is ErrInvalid, which no retry
// can change; a client that lost its connection is ErrUnavailable.
func TestErrorKind(t *testing.T) {
	d, err := zookeeper.New(zookeeper.Options{Servers: []string{shared.Addr()}, Root: "/kinds"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	root := freshRoot(t, "kinds")
	alice, mallory := rawClient(t, "alice:alice-pw"), rawClient(t, "mallory:mallory-pw")
	if _, err := alice.Create(root, nil, 0, zk.AuthACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Create(root+"/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	closed := rawClient(t, "bob:bob-pw")
	closed.Close()
	for _, row := range []struct {
		name string
		call func() error
		want error
	}{
		{"get a missing znode", func() error { _, _, err := alice.Get(root + "/none"); return err }, driver.ErrNotFound},
		{"delete by another identity", func() error { return mallory.Delete(root+"/eph", -1) }, driver.ErrInvalid},
		{"set at a stale version", func() error { _, err := alice.Set(root, nil, 7); return err }, driver.ErrInvalid},
		{"a child of an ephemeral", func() error {
			_, err := alice.Create(root+"/eph/kid", nil, 0, zk.WorldACL(zk.PermAll))
			return err
		}, driver.ErrInvalid},
		{"an invalid path", func() error { _, _, err := alice.Get("no-slash"); return err }, driver.ErrInvalid},
		{"a closed client", func() error { _, _, err := closed.Get(root); return err }, driver.ErrUnavailable},
	} {
		err := row.call()
		if err == nil {
			t.Errorf("%s: no error", row.name)
			continue
		}
		if got := d.ErrorKind(err); got != row.want {
			t.Errorf("%s: ErrorKind(%v) = %v, want %v", row.name, err, got, row.want)
		}
	}
}
