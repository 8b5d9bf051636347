package loopback

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves a line echo on loopback until the listener closes.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	l, err := bufio.NewReader(c).ReadString('\n')
	return l, err
}

func TestProxyCutAndRestore(t *testing.T) {
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.SetConnected(context.Background(), false)
	if _, err := roundTrip(c, "lost"); err == nil {
		t.Fatal("an established connection survived the cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if _, err := roundTrip(c2, "refused"); err == nil {
			t.Fatal("a new connection got through while cut")
		}
		c2.Close()
	}
	p.SetConnected(context.Background(), true)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "back"); err != nil || got != "back\n" {
		t.Fatalf("after restore: %q, %v", got, err)
	}
}

func TestFreeAddr(t *testing.T) {
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("FreeAddr %s not usable: %v", a, err)
	}
	ln.Close()
}
