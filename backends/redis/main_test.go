package redis_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// tryDial is go-redis's redial loop for a pool whose dials all failed: it
// sleeps a second between tries and notices Close only when it wakes.
const tryDial = "github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"

// TestMain fails on any goroutine left running, giving a client closed
// during an outage the second its redial loop takes to end.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func findLeaks() error {
	if err := goleak.Find(goleak.IgnoreAnyFunction(tryDial)); err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
