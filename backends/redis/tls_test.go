package redis_test

import (
	"errors"
	"testing"

	"github.com/roster-go/roster/backends/redis/redistest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

// Mutual TLS with a private CA: the server is trusted through ca_file and
// the client is let in by its cert_file and key_file; without either,
// the connection fails.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	f := writeCerts(t, t.TempDir())
	srv := redistest.StartTLS(t, f)
	ctx := t.Context()
	base := "rediss://" + srv.TLSAddr() + "/0?dial_timeout=1s"
	r := open(t, base+"&ca_file="+f.CAFile+"&cert_file="+f.CertFile+"&key_file="+f.KeyFile)
	if _, err := r.Register(ctx, registry.Instance{Service: "tls", Address: "127.0.0.1:80"}); err != nil {
		t.Fatalf("Register over mutual TLS: %v", err)
	}
	if s, err := r.Lookup(ctx, "tls"); err != nil || len(s.Instances) != 1 {
		t.Fatalf("Lookup over mutual TLS: %v, %v", s.Instances, err)
	}
	for name, u := range map[string]string{
		"without a client certificate": base + "&ca_file=" + f.CAFile,
		"without the CA":               base + "&cert_file=" + f.CertFile + "&key_file=" + f.KeyFile,
	} {
		if _, err := open(t, u).Lookup(ctx, "tls"); !errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("Lookup %s = %v, want ErrUnavailable", name, err)
		}
	}
}

// writeCerts makes a CA and a certificate for 127.0.0.1 signed by it
// (good for a server and a client), as PEM files in dir.
func writeCerts(t *testing.T, dir string) redistest.TLSFiles {
	f := testca.Write(t, dir)
	return redistest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}
