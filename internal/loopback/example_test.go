package loopback_test

import (
	"context"
	"fmt"
	"net"

	"github.com/roster-go/roster/internal/loopback"
)

// A Proxy stands between a client and a server so that a test can cut
// the network between them, as a partition would, and heal it.
func ExampleProxy() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()

	p, err := loopback.NewProxy(ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	read := func() string {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		buf := make([]byte, 6)
		n, _ := c.Read(buf)
		return fmt.Sprintf("%q", buf[:n])
	}
	fmt.Println(read())
	p.SetConnected(context.Background(), false)
	fmt.Println(read()) // accepted, then closed at once
	p.SetConnected(context.Background(), true)
	fmt.Println(read())
	// Output:
	// "hello\n"
	// ""
	// "hello\n"
}
