package kubernetes_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/registry"
)

// An apiserver restarted at once on wiped etcd listens before it serves:
// a probe sent during the restart waits in its backlog and is answered by
// the new, empty apiserver. The watchdog must still see the outage, by
// the resourceVersion going back, or the informers wait for a version that
// never comes while Leases lapse by the watcher's clock and healthy
// instances are dropped (the chaos suite's kubernetes/restart-empty:
// 1,151 of 4,066 calls failed).
func TestProbeSeesStorageLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := kubetest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	raw, err := s.URL(s.Addr(), "default")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	o, err := kubernetes.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	d, err := kubernetes.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Writes move the resourceVersion well past where the restarted
	// apiserver's own bootstrap writes leave it.
	r := registry.New(d)
	defer r.Close()
	for i := range 40 {
		in := registry.Instance{ID: fmt.Sprintf("i%d", i), Service: "probe-rv", Address: fmt.Sprintf("10.0.0.%d:80", i+1)}
		if _, err := r.Register(ctx, in, registry.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := d.Watch(ctx, "probe-rv")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Probe(ctx); err != nil {
		t.Fatalf("probe before the restart: %v", err)
	}
	if err := s.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	err = d.Probe(ctx)
	if err == nil {
		t.Fatal("probe after the apiserver lost its data: no error")
	}
	t.Log(err)
}
