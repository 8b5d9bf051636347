package rostergrpc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// firstAnswer is what a resolver knows before its first snapshot: since
// when it waits, and the registry's last error. Until the resolver
// reports something, grpc-go holds every RPC, and one whose deadline
// ends first gets a bare "context deadline exceeded": the registry may
// take its whole dial or request timeout (5s for etcd) to fail.
type firstAnswer struct {
	mu    sync.Mutex
	since time.Time
	done  bool
	err   error
}

func newFirstAnswer() *firstAnswer { return &firstAnswer{since: time.Now()} }

func (f *firstAnswer) answered() {
	f.mu.Lock()
	f.done, f.err = true, nil
	f.mu.Unlock()
}

func (f *firstAnswer) failed(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// waiting reports whether there was no answer yet, since when, and the
// last error.
func (f *firstAnswer) waiting() (bool, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.done, f.since, f.err
}

// starts maps each target of one DialOptions to its resolver's
// firstAnswer, for the interceptors.
type starts struct {
	mu sync.Mutex
	m  map[string]*rosterResolver
}

// track records r, built for target, until it closes.
func (s *starts) track(target string, res resolver.Resolver) resolver.Resolver {
	r, ok := res.(*rosterResolver)
	if !ok {
		return res
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*rosterResolver{}
	}
	s.m[target] = r
	s.mu.Unlock()
	return &trackedResolver{rosterResolver: r, untrack: func() {
		s.mu.Lock()
		if s.m[target] == r {
			delete(s.m, target)
		}
		s.mu.Unlock()
	}}
}

type trackedResolver struct {
	*rosterResolver
	untrack func()
}

func (t *trackedResolver) Close() {
	t.untrack()
	t.rosterResolver.Close()
}

// explain names the registry in an RPC's bare DeadlineExceeded (or
// Canceled) when the resolver of cc has had no answer from it yet.
func (s *starts) explain(cc *grpc.ClientConn, err error) error {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled) {
		return err
	}
	s.mu.Lock()
	r := s.m[cc.CanonicalTarget()]
	s.mu.Unlock()
	if r == nil || strings.Contains(st.Message(), r.reg) { // grpc-go quoted the resolver's error
		return err
	}
	waiting, since, last := r.first.waiting()
	if !waiting {
		return err
	}
	why := fmt.Sprintf("no answer yet from %s after %v", r.reg, time.Since(since).Round(time.Millisecond))
	if last != nil {
		why = last.Error()
	}
	return status.Errorf(st.Code(), "%s: rostergrpc: %s: %s", st.Message(), r.service, why)
}

func (s *starts) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return s.explain(cc, invoker(ctx, method, req, reply, cc, opts...))
}

func (s *starts) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, s.explain(cc, err)
	}
	return cs, nil
}
