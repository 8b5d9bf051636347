package testserver_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/roster-go/roster/internal/testserver"
)

func Example() {
	dir, _ := os.MkdirTemp("", "testserver-example-")
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "server.log")

	var p testserver.Process
	if err := p.Start(exec.Command("sh", "-c", "echo serving; exec sleep 60"), log); err != nil {
		fmt.Println(err)
		return
	}
	for testserver.LogTail(log, -1) == "" {
		select {
		case <-p.Done():
			fmt.Println("exited early")
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.Kill()
	p.Kill() // safe twice
	fmt.Print(testserver.LogTail(log, 8))
	fmt.Println(p.Running())
	// Output:
	// serving
	// false
}

func ExampleURL() {
	fmt.Println(testserver.URL("consul://127.0.0.1:8500", ""))
	fmt.Println(testserver.URL("zk://127.0.0.1:2181/roster", "?session_timeout=3s"))
	// Output:
	// consul://127.0.0.1:8500
	// zk://127.0.0.1:2181/roster?session_timeout=3s
}
