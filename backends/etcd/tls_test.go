package etcd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/etcd/etcdtest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

func TestTLS(t *testing.T) {
	files := writeCerts(t, t.TempDir())
	c := startCluster(t, etcdtest.Config{TLS: files})
	ctx := t.Context()
	u := c.URL("/tls")
	if !strings.HasPrefix(u, "etcds://") {
		t.Fatalf("URL of a TLS cluster = %s", u)
	}
	r, err := registry.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"}, registry.WithTTL(3*time.Second)); err != nil {
		t.Fatalf("Register over TLS: %v", err)
	}
	if sn, err := r.Lookup(ctx, "svc"); err != nil || len(sn.Instances) != 1 {
		t.Fatalf("Lookup over TLS: %v %v", sn.Instances, err)
	}

	// Without the CA the server's certificate is not trusted.
	hosts := u[len("etcds://"):strings.Index(u, "?")]
	untrusted, err := registry.Open(ctx, "etcds://"+hosts+"?prefix=/tls&request_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if _, err := untrusted.Lookup(ctx, "svc"); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Lookup with an untrusted server certificate = %v, want ErrUnavailable", err)
	}
}

// writeCerts makes a CA and a server certificate for 127.0.0.1 signed by
// it, as PEM files in dir.
func writeCerts(t *testing.T, dir string) *etcdtest.TLSFiles {
	f := testca.Write(t, dir)
	return &etcdtest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}
