package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/registry"
)

// Register an instance in Redis and watch its service. (Not run by go
// test: it needs a Redis at 127.0.0.1:6379.)
func Example() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "redis://127.0.0.1:6379/0") // layout=hash by default
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()

	lease, err := reg.Register(ctx, registry.Instance{Service: "user-svc", Address: "10.0.0.1:8080", Version: "1.2.0"},
		registry.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Deregister(ctx)

	w, err := reg.Watch(ctx, "user-svc")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	snap, err := w.Next(ctx) // the current set; later calls block until it changes
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range snap.Instances {
		fmt.Println(in.Address, in.Version)
	}
}

// Share a Redis with scripts that follow the article's layout: keys
// service:<name>:<addr>, JSON values with string fields. With keyspace
// notifications enabled on the server (notify-keyspace-events Eg$x) a
// watch reacts to their SET, DEL and expiry at once; without, within one
// poll interval.
func Example_keysLayout() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "redis://:secret@127.0.0.1:6379/0?layout=keys&poll=2s")
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	snap, err := reg.Lookup(ctx, "order") // includes records written by those scripts
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(snap.Instances), "instances")
}
