package chaos

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// idHeader is the gRPC response header that carries the instance ID.
const idHeader = "x-chaos-instance"

// newGRPCServer returns a gRPC server of the standard health service
// whose every answer names the instance in its header.
func newGRPCServer(id string) *grpc.Server {
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(idHeader, id))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	return gs
}

// http2Preface is how every HTTP/2 client (gRPC's) opens a connection;
// an HTTP/1 request never starts with "PRI".
const http2Preface = "PRI"

// splitHTTP2 splits the connections accepted on ln by their first bytes:
// HTTP/2 (gRPC) to the second listener, the rest (HTTP/1) to the first,
// so that an instance serves both on the one address it registers.
// Closing either listener closes ln and both.
func splitHTTP2(ln net.Listener) (http1, http2 net.Listener) {
	s := &split{Listener: ln, done: make(chan struct{})}
	a := &splitSide{s, make(chan net.Conn)}
	b := &splitSide{s, make(chan net.Conn)}
	go func() {
		defer a.Close()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.route(c, a, b)
		}
	}()
	return a, b
}

// split is the state the two sides of a split listener share.
type split struct {
	net.Listener
	done chan struct{}
	once sync.Once
}

// route reads c's first bytes and hands it to its side.
func (s *split) route(c net.Conn, http1, http2 *splitSide) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	head, err := br.Peek(len(http2Preface))
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	to := http1
	if string(head) == http2Preface {
		to = http2
	}
	select {
	case to.conns <- &peekedConn{Conn: c, r: br}:
	case <-s.done:
		c.Close()
	}
}

// splitSide is one listener of a split.
type splitSide struct {
	*split
	conns chan net.Conn
}

func (l *splitSide) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *splitSide) Close() error {
	l.once.Do(func() { close(l.done); _ = l.Listener.Close() })
	return nil
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
