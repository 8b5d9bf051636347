// Package etcdembed starts etcd members inside the calling process, on
// go.etcd.io/etcd/server/v3/embed, and stops them promptly. It is the code
// that backends/etcd/etcdlocal and backends/etcd/etcdtest share. etcdlocal
// runs one member for development, and etcdtest runs clusters with faults
// for tests.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
)

// Spec describes one member.
type Spec struct {
	Name      string  // unique in its cluster
	Dir       string  // data directory; existing data is reused
	ClientURL url.URL // http://ip:port, or https:// with ClientTLS
	// ListenClientURL is where the member listens for clients, when not
	// ClientURL (which it advertises): a wildcard such as http://0.0.0.0:2379.
	ListenClientURL *url.URL
	PeerURL         url.URL // http://ip:port
	// InitialCluster lists every member as name=peerURL, comma-separated.
	// Empty: this member alone. Ignored when Dir already holds data.
	InitialCluster string
	Token          string // initial cluster token
	ClientTLS      transport.TLSInfo
	NoFsync        bool // speed over durability (test data)
	// CheapPasswords hashes user passwords at bcrypt's least cost: logins
	// of test users then take microseconds, not tens of milliseconds each.
	CheapPasswords bool
	Logger         *zap.Logger // nil: none
}

// Member is a started member.
type Member struct {
	e *embed.Etcd

	mu     sync.Mutex
	grpc   []*grpc.Server // the client-facing servers, to cut on Close
	closed bool
}

// Start starts a member and returns once its listeners are open; see
// WaitReady. A member of a cluster becomes ready only once a quorum runs,
// so start every member before waiting for any.
func Start(s Spec) (*Member, error) {
	m := &Member{}
	e, err := embed.StartEtcd(s.config(m.track))
	if err != nil {
		return nil, err
	}
	m.e = e
	return m, nil
}

func (s Spec) config(register func(*grpc.Server)) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.Dir
	cfg.ListenClientUrls = []url.URL{s.ClientURL}
	if s.ListenClientURL != nil {
		cfg.ListenClientUrls = []url.URL{*s.ListenClientURL}
	}
	cfg.AdvertiseClientUrls = []url.URL{s.ClientURL}
	cfg.ClientTLSInfo = s.ClientTLS
	cfg.ListenPeerUrls = []url.URL{s.PeerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.PeerURL}
	cfg.InitialCluster = s.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = s.Name + "=" + s.PeerURL.String()
	}
	cfg.InitialClusterToken = s.Token
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored when the data dir exists
	cfg.UnsafeNoFsync = s.NoFsync
	if s.CheapPasswords {
		cfg.BcryptCost = uint(bcrypt.MinCost)
	}
	lg := s.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	// ServiceRegister is etcd's hook for adding gRPC services; it is also
	// the only way to reach the servers that Close must cut.
	cfg.ServiceRegister = register
	return cfg
}

func (m *Member) track(g *grpc.Server) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.grpc = append(m.grpc, g)
	}
}

// WaitReady waits until the member serves clients. It fails when the
// member stops with an error, after timeout, or when ctx ends.
func (m *Member) WaitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-m.e.Server.ReadyNotify():
		return nil
	case err := <-m.e.Err():
		if err == nil {
			err = errors.New("stopped")
		}
		return fmt.Errorf("failed: %w", err)
	case <-t.C:
		return fmt.Errorf("not ready within %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Server is the running etcd server, for its raft state (Leader,
// MemberID).
func (m *Member) Server() *etcdserver.EtcdServer { return m.e.Server }

// Close stops the member, keeping its data. Client connections are cut
// first: etcd's own Close waits for open watch streams, which never end by
// themselves, for up to 7 seconds.
func (m *Member) Close() {
	m.mu.Lock()
	m.closed = true
	servers := m.grpc
	m.grpc = nil
	m.mu.Unlock()
	for _, g := range servers {
		g.Stop()
	}
	m.e.Close()
}

// RegistryURL formats a Roster registry URL for the given client hosts:
// "etcd://h1:p1,h2:p2?prefix=…", or etcds:// with tls (and ca_file when
// caFile is set). Options ("progress_interval=1s") are appended as given.
func RegistryURL(hosts []string, tls bool, caFile, prefix string, options []string) string {
	var q []string
	if prefix != "" {
		q = append(q, "prefix="+url.QueryEscape(prefix))
	}
	scheme := "etcd://"
	if tls {
		scheme = "etcds://"
		if caFile != "" {
			q = append(q, "ca_file="+url.QueryEscape(caFile))
		}
	}
	q = append(q, options...)
	u := scheme + strings.Join(hosts, ",")
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}
