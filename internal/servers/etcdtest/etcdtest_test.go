package etcdtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/roster-go/roster/internal/servers/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFaultHooks(t *testing.T) {
	ctx := t.Context()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close() // before c.Close

	put, err := cli.Put(ctx, "k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}

	// Compact: the first revision is gone.
	rev, err := c.Compact(ctx)
	if err != nil || rev <= put.Header.Revision {
		t.Fatalf("Compact = %d, %v", rev, err)
	}
	if _, err := cli.Get(ctx, "k", clientv3.WithRev(put.Header.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("Get at a compacted revision = %v, want ErrCompacted", err)
	}

	// Restart keeping data: the key survives, and the old client
	// reconnects by itself. Stopping is fast although the client is open.
	start := time.Now()
	if err := c.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Restart took %v with a client open; the front proxy should make it quick", el)
	}
	got := eventuallyGet(t, cli, "k")
	if got == nil || string(got.Kvs[0].Value) != "v2" {
		t.Fatalf("after Restart(keep): %v", got)
	}

	// Wipe: nothing left, revisions start again.
	if err := c.Wipe(ctx); err != nil {
		t.Fatal(err)
	}
	got = eventuallyGet(t, cli, "k")
	if len(got.Kvs) != 0 || got.Header.Revision >= rev {
		t.Fatalf("after Wipe: %d keys at revision %d (was %d)", len(got.Kvs), got.Header.Revision, rev)
	}

	l, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.URL("/p") == c.URL("/p") {
		t.Fatal("a link must have its own address")
	}
}

func TestStopAndStartMember(t *testing.T) {
	ctx := t.Context()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Members: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lead := c.Leader()
	if lead < 0 || c.Members() != 3 || len(c.Endpoints()) != 3 {
		t.Fatalf("leader %d, %d members, endpoints %v", lead, c.Members(), c.Endpoints())
	}
	if err := c.StopMember(lead); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if l := c.Leader(); l >= 0 && l != lead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader after stopping the old one")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.StartMember(ctx, lead); err != nil {
		t.Fatal(err)
	}
}

// eventuallyGet reads key, retrying while the client reconnects.
func eventuallyGet(t *testing.T, cli *clientv3.Client, key string) *clientv3.GetResponse {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		resp, err := cli.Get(ctx, key)
		cancel()
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get(%s) after the fault: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
