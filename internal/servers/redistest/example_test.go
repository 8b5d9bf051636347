package redistest_test

import (
	"context"
	"fmt"
	"os"

	"github.com/roster-go/roster/internal/servers/redistest"
)

// NewServer starts a private redis-server on a free loopback port, for a
// test or a tool; Start does the same for a test and stops it at cleanup.
// Kill and Restart play the faults a test needs.
func ExampleNewServer() {
	dir, err := os.MkdirTemp("", "redistest-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.NewServer(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()

	ctx := context.Background()
	rdb := srv.Client()
	defer rdb.Close()
	rdb.Set(ctx, "greeting", "hello", 0)
	if err := srv.Restart(ctx, false); err != nil { // back empty, as after a crash without persistence
		fmt.Println(err)
		return
	}
	n, err := rdb.Exists(ctx, "greeting").Result()
	fmt.Println(n, err)
	// Output: 0 <nil>
}
