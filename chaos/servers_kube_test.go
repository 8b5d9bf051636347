package chaos

import (
	"context"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/kubernetes" // k8s://
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/kubetest"
)

// kubeNamespace survives a wiped etcd: the apiserver recreates it.
const kubeNamespace = "default"

// kubeServer is a private kube-apiserver over its own embedded etcd.
// Instances register from outside the cluster (a Lease and an
// EndpointSlice each). Without its data is the apiserver on wiped etcd.
type kubeServer struct {
	s *kubetest.Server
	u string // the URL through a kubeconfig written once
}

func startKubernetes(t *testing.T) server {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := kubetest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	u, err := s.URL(s.Addr(), kubeNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return &kubeServer{s: s, u: u}
}

func (s *kubeServer) url() string { return s.u }

func (s *kubeServer) link() (string, func(bool), func(), error) {
	p, err := loopback.NewProxy(s.s.Addr())
	if err != nil {
		return "", nil, nil, err
	}
	u, err := s.s.URL(p.Addr(), kubeNamespace)
	if err != nil {
		p.Close()
		return "", nil, nil, err
	}
	cut := func(ok bool) { _ = p.SetConnected(context.Background(), ok) }
	return u, cut, func() { p.Close() }, nil
}

func (s *kubeServer) crash() error                         { s.s.Kill(); return nil }
func (s *kubeServer) startEmpty(ctx context.Context) error { return s.s.Start(ctx, false) }
func (s *kubeServer) restart(ctx context.Context) error    { return s.s.Restart(ctx, true) }
