package tcpcount_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/roster-go/roster/internal/tcpcount"
)

// Three connections to a listener are counted, and none after they close.
func TestEstablished(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c, s)
	}
	if n, err := tcpcount.Established(port); err != nil || n != 3 {
		t.Fatalf("Established = %d, %v; want 3", n, err)
	}
	for _, c := range conns {
		c.Close()
	}
	if n, err := tcpcount.Established(port); err != nil || n != 0 {
		t.Fatalf("after close: Established = %d, %v; want 0", n, err)
	}
}

func ExampleEstablished() {
	n, err := tcpcount.Established(6379)
	fmt.Println(n >= 0, err)
	// Output: true <nil>
}
