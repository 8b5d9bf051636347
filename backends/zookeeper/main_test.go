package zookeeper_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	_ "github.com/roster-go/roster/backends/zookeeper" // zk:// for the harnesses
	"github.com/roster-go/roster/internal/servers/zktest"
)

// shared is the package's standalone server, for the tests that do not
// kill it: one JVM start for all of them.
var shared *zktest.Server

// TestMain starts the shared server and checks for leaked goroutines:
// every test closes its clients.
func TestMain(m *testing.M) {
	s, err := zktest.NewServer("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	s.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
