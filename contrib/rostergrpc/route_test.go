package rostergrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestMetadataRouting: x-roster-version pins an RPC to a version,
// x-roster-hash-key keeps a key on one instance, and a version that is not
// deployed fails rather than going elsewhere.
func TestMetadataRouting(t *testing.T) {
	reg := openMem(t)
	startInstance(t, reg, registry.Instance{Service: "echo", Version: "1.0"}, "v1a", 0)
	startInstance(t, reg, registry.Instance{Service: "echo", Version: "1.0"}, "v1b", 0)
	startInstance(t, reg, registry.Instance{Service: "echo", Version: "2.0"}, "v2", 0)
	c := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.ConsistentHash))
	ctx := context.Background()
	v2 := metadata.AppendToOutgoingContext(ctx, "x-roster-version", "2.0")
	v1 := metadata.AppendToOutgoingContext(ctx, "x-roster-version", "1.0")
	for range 20 {
		if name, err := call(v2, c); err != nil || name != "v2" {
			t.Fatalf("x-roster-version 2.0: %q %v, want v2", name, err)
		}
		if name, err := call(v1, c); err != nil || name == "v2" {
			t.Fatalf("x-roster-version 1.0: %q %v", name, err)
		}
	}
	keyed := metadata.AppendToOutgoingContext(ctx, "x-roster-hash-key", "user-7")
	names := map[string]bool{}
	for range 20 {
		name, err := call(keyed, c)
		if err != nil {
			t.Fatal(err)
		}
		names[name] = true
	}
	if len(names) != 1 {
		t.Errorf("x-roster-hash-key user-7 went to %v, want one instance", names)
	}
	absent := metadata.AppendToOutgoingContext(ctx, "x-roster-version", "3.0")
	if name, err := call(absent, c); err == nil {
		t.Errorf("x-roster-version 3.0 (not deployed) answered by %s, want an error", name)
	}
}
