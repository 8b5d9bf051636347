package redis_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// sentinelConformance runs the suite on a master, its replica and a
// Sentinel, then sentinelFailover, last: it leaves the master dead.
func sentinelConformance(t *testing.T) {
	f := redistest.StartFailover(t)
	conformance.Run(t, f.Harness(t, hash, hashCfg))
	t.Run("Failover", func(t *testing.T) { sentinelFailover(t, f) })
}

// sentinelFailover: the master crashes, Sentinel promotes the replica;
// the lease keeps (or re-creates) its instance on the new master and a
// watcher converges, with registrations flowing again.
func sentinelFailover(t *testing.T, f *redistest.Failover) {
	ctx := t.Context()
	u := "redis+sentinel://" + f.Sentinel.Addr() + "?master=" + f.Name + "&dial_timeout=300ms"
	r := open(t, u)
	obs := open(t, u)
	l, err := r.Register(ctx, registry.Instance{Service: "fo", Address: "127.0.0.1:1"}, registry.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w, err := obs.Watch(ctx, "fo")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1 {
		t.Fatalf("first Next = %v, %v", s.Instances, err)
	}
	f.Master.Kill()
	var l2 *registry.Lease
	waitFor(t, 30*time.Second, "a registration accepted by the promoted replica", func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l2, err = r.Register(cctx, registry.Instance{Service: "fo", Address: "127.0.0.1:2"}, registry.WithTTL(2*time.Second))
		return err == nil
	})
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		s, err := w.Next(wctx)
		if err != nil && !s.Stale {
			t.Fatalf("watcher after failover: %v", err)
		}
		_, ok1 := s.Find(l.Instance().ID)
		_, ok2 := s.Find(l2.Instance().ID)
		if !s.Stale && ok1 && ok2 {
			break
		}
	}
	if st := l.State(); st == registry.LeaseClosed {
		t.Fatalf("lease state %v after failover", st)
	}
}

// A Sentinel deployment over mutual TLS whose Sentinel requires a
// password: the client reaches the master through the Sentinel with
// sentinel_password (or sentinel_password_file) and the TLS options;
// without the password, or with a wrong one, the first call fails with
// ErrInvalid naming the refusal.
func TestSentinelTLSAndPassword(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := redistest.StartFailoverWith(t, redistest.FailoverOptions{TLS: ptr(writeCerts(t, dir)), SentinelPassword: "sentinel-s3cret"})
	pwFile := filepath.Join(dir, "sentinel.pw")
	if err := os.WriteFile(pwFile, []byte("sentinel-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOpts := "&ca_file=" + filepath.Join(dir, "ca.pem") + "&cert_file=" + filepath.Join(dir, "cert.pem") + "&key_file=" + filepath.Join(dir, "key.pem")
	base := "rediss+sentinel://" + f.Sentinel.TLSAddr() + "/0?master=" + f.Name + "&dial_timeout=1s" + tlsOpts
	ctx := t.Context()
	for _, pw := range []string{"&sentinel_password=sentinel-s3cret", "&sentinel_password_file=" + pwFile} {
		r := open(t, base+pw)
		if _, err := r.Register(ctx, registry.Instance{Service: "sec", Address: "127.0.0.1:80"}); err != nil {
			t.Fatalf("Register through a TLS Sentinel with its password: %v", err)
		}
		if s, err := r.Lookup(ctx, "sec"); err != nil || len(s.Instances) == 0 {
			t.Fatalf("Lookup through a TLS Sentinel: %v, %v", s.Instances, err)
		}
	}
	for name, u := range map[string]string{
		"no password":    base,
		"wrong password": base + "&sentinel_password=wrong",
	} {
		_, err := open(t, u).Lookup(ctx, "sec")
		t.Logf("%s: %v", name, err)
		if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Lookup with %s = %v, want ErrInvalid, the password not shown", name, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
