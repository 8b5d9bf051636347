package rostergrpc_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/registry"
)

// blackHole listens on loopback and accepts connections that never get
// an answer: a registry that cannot be reached, as behind a firewall
// that drops, or a hung server.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A registry that cannot be reached when the client starts is named in
// the RPC's error: an RPC whose deadline ends before the registry's own
// timeout gets DeadlineExceeded naming it (not a bare "context deadline
// exceeded"); once the registry's attempt failed, an RPC fails fast
// with Unavailable naming the registry and the cause, and a
// wait-for-ready RPC's DeadlineExceeded names them too. The password
// is never in it.
func TestUnreachableRegistryNamedInTheRPCError(t *testing.T) {
	const secret = "S3kr1t-grpc"
	addr := blackHole(t)
	reg, err := registry.Open(context.Background(), "redis://:"+secret+"@"+addr+"/0?dial_timeout=2s&read_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	c := dial(t, reg, "down")
	want := "redis://:xxxxx@" + addr // registry.Redact's form
	rpc := func(timeout time.Duration, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, opts...)
		if err == nil {
			t.Fatal("an RPC succeeded with no registry")
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error shows the password: %v", err)
		}
		return err
	}

	start := time.Now()
	err = rpc(500 * time.Millisecond)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "no answer yet") {
		t.Fatalf("an RPC before the registry's first answer: %v; want DeadlineExceeded naming %s", err, want)
	}
	t.Logf("before the registry's timeout (%v): %v", time.Since(start).Round(time.Millisecond), err)

	// The registry's attempt fails within its timeouts: RPCs then fail
	// at once, naming the registry and the cause.
	// The first RPC below may wait for it.
	if err = rpc(30 * time.Second); status.Code(err) != codes.Unavailable {
		t.Fatalf("an RPC waiting for the registry's first answer: %v; want Unavailable", err)
	}
	t0 := time.Now()
	err = rpc(10 * time.Second)
	if took := time.Since(t0); status.Code(err) != codes.Unavailable || took > 2*time.Second {
		t.Fatalf("a non-wait-for-ready RPC took %v and got %v; want Unavailable at once", took, err)
	}
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("Unavailable without the registry or the cause: %v", err)
	}
	t.Logf("after the registry's error: %v", err)

	err = rpc(300*time.Millisecond, grpc.WaitForReady(true))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), want) {
		t.Fatalf("a wait-for-ready RPC: %v; want DeadlineExceeded naming %s", err, want)
	}
	t.Logf("wait for ready: %v", err)
}
