package zktest_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/roster-go/roster/internal/servers/zktest"
)

// ExampleNewServer runs a standalone ZooKeeper for a demo or a test and
// prints the registry URL that reaches it.
func ExampleNewServer() {
	s, err := zktest.NewServer("")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	u := s.URL("/roster", "session_timeout=5s") // zk://127.0.0.1:<port>/roster?session_timeout=5s
	fmt.Println(strings.HasPrefix(u, "zk://127.0.0.1:"), s.Mode())
	// Output: true standalone
}
