package etcd

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// renewer renews leases over one LeaseKeepAlive stream, opened at the
// first renewal and again after a failure. The client's KeepAliveOnce
// opens a stream per call, and the client authenticates anew on every
// stream it opens: with a password, each renewal would cost the cluster a
// bcrypt comparison and a Raft write (TestHeartbeatsDoNotAuthenticate).
// The client's KeepAlive keeps one stream but renews by itself, for as
// long as the process lives; the pool must renew only on a heartbeat, so
// that a lease whose registrations stopped beating expires.
type renewer struct {
	mu     sync.Mutex // one renewal at a time: replies come in order
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
}

// renewal is what one renewal's goroutine found: the lease's TTL, or an
// error; and the stream it opened, if it had to.
type renewal struct {
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc // set when stream is new
	ttl    int64
	err    error
}

// renew renews lease id once, within ctx. It returns
// rpctypes.ErrLeaseNotFound when the server no longer has the lease.
func (k *renewer) renew(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	done := make(chan renewal, 1)
	go func(r renewal) {
		if r.stream == nil {
			if r.stream, r.cancel, r.err = open(cli); r.err != nil {
				done <- r
				return
			}
		}
		if r.err = r.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); r.err == nil {
			var resp *pb.LeaseKeepAliveResponse
			if resp, r.err = r.stream.Recv(); r.err == nil {
				r.ttl = resp.TTL
			}
		}
		done <- r
	}(renewal{stream: k.stream})
	select {
	case r := <-done:
		if r.cancel != nil {
			k.stream, k.cancel = r.stream, r.cancel
		}
		switch {
		case r.err != nil:
			k.reset()
			return rpctypes.Error(r.err) // as the client's own calls return it
		case r.ttl <= 0:
			return rpctypes.ErrLeaseNotFound
		}
		return nil
	case <-ctx.Done():
		// A reply may still come on the stream, out of step with the
		// next request: drop the stream, and one still being opened.
		k.reset()
		go func() {
			if r := <-done; r.cancel != nil {
				r.cancel()
			}
		}()
		return ctx.Err()
	}
}

// open opens a stream. Its context is the stream's own, cancelled when the
// stream is dropped, not a call's: the stream outlives the renewal.
func open(cli *clientv3.Client) (pb.Lease_LeaseKeepAliveClient, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	s, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return s, cancel, nil
}

// reset drops the stream; k.mu is held.
func (k *renewer) reset() {
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.cancel = nil, nil
}

// close drops the stream, for Driver.Close.
func (k *renewer) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reset()
}
