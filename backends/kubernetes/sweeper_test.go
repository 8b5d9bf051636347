package kubernetes_test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/registry"
)

// callCounter counts a client's calls to the apiserver by kind: "list
// leases", "get lease", "update lease"…
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[callKind(r)]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// callKind names a call by its verb and resource: .../namespaces/NS/RES
// is a list (or a watch) of RES, .../namespaces/NS/RES/NAME a call on one.
func callKind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	for j, p := range parts {
		if p != "namespaces" || j+2 >= len(parts) {
			continue
		}
		res, verb := parts[j+2], strings.ToLower(r.Method)
		switch {
		case j+3 < len(parts):
			return verb + " " + strings.TrimSuffix(res, "s")
		case r.Method != http.MethodGet:
			return verb + " " + res
		case r.URL.Query().Get("watch") == "true":
			return "watch " + res
		}
		return "list " + res
	}
	return r.Method + " " + r.URL.Path
}

func (c *callCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = nil
	return n
}

// sweepDriver opens a driver as the test user in ns, sweeping every
// interval, with its calls counted by c (nil: not counted).
func sweepDriver(t *testing.T, ns string, interval time.Duration, c *callCounter) *kubernetes.Driver {
	t.Helper()
	kc, err := server.KubeconfigFor(kubetest.Access{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		cfg.WrapTransport = c.wrap
	}
	d, err := kubernetes.New(kubernetes.Options{Config: cfg, Namespace: ns, SweepInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sweepProcs is the number of registering processes of
// TestSweepCostPerNamespace: $ROSTER_K8S_SWEEPERS, default 8.
func sweepProcs(t *testing.T) int {
	n := 8
	if v := os.Getenv("ROSTER_K8S_SWEEPERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("ROSTER_K8S_SWEEPERS=%q: want a count", v)
		}
	}
	return n
}

// Issue #28: every process holding a registration listed all Roster
// Leases of the namespace each sweep interval, so the namespace paid
// processes × Leases per interval. Now the processes elect one sweeper:
// the namespace pays one list per interval, the others one small read.
func TestSweepCostPerNamespace(t *testing.T) {
	const ns, interval, window = "roster-sweep-cost", 500 * time.Millisecond, 4 * time.Second
	ctx := t.Context()
	if err := server.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	procs := sweepProcs(t)
	counters := make([]*callCounter, procs)
	for i := range procs {
		counters[i] = &callCounter{}
		r := registry.New(sweepDriver(t, ns, interval, counters[i]))
		t.Cleanup(func() { r.Close() })
		if _, err := r.Register(ctx, registry.Instance{Service: "sweep-cost", Address: fmt.Sprintf("10.9.%d.%d:80", i/250, i%250+1)},
			registry.WithTTL(10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range counters {
		c.take()
	}
	time.Sleep(window) // the measurement window
	lists, gets, updates := 0, 0, 0
	for _, c := range counters {
		n := c.take()
		lists += n["list leases"]
		gets += n["get lease"]
		updates += n["put lease"]
	}
	rounds := int(window / interval)
	t.Logf("%d processes, %d sweep rounds of %v: %d lease lists (%.1f/s), %d lease gets, %d lease updates (heartbeats included)",
		procs, rounds, interval, lists, float64(lists)/window.Seconds(), gets, updates)
	if lists > rounds+2 {
		t.Errorf("%d lists of the namespace's Leases in %d rounds by %d processes, want at most one a round", lists, rounds, procs)
	}
}

// The sweeper's Lease goes with the driver that holds it, and another
// driver sweeps a crashed registration in its place.
func TestSweeperHandsOver(t *testing.T) {
	const ns, interval = "roster-sweep-handover", 300 * time.Millisecond
	ctx := t.Context()
	if err := server.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cs, err := server.Clientset(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases(ns)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(50 * time.Millisecond) // polling period
		}
	}
	sweeperHolder := func() string {
		l, err := leases.Get(ctx, "roster-sweeper", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	a := sweepDriver(t, ns, interval, nil)
	if _, err := a.Register(ctx, registry.Instance{ID: "a", Service: "handover", Address: "10.9.1.1:80"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor("a sweeper elected", func() bool { return sweeperHolder() != "" })
	first := sweeperHolder()
	b := sweepDriver(t, ns, interval, nil)
	defer b.Close()
	if _, err := b.Register(ctx, registry.Instance{ID: "b", Service: "handover", Address: "10.9.1.2:80"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A registration whose process crashes: no heartbeat, no deregister.
	crashed := kubernetes.ObjectName("handover", "crashed")
	c := sweepDriver(t, ns, time.Hour, nil)
	if _, err := c.Register(ctx, registry.Instance{ID: "crashed", Service: "handover", Address: "10.9.1.3:80"}, time.Second); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := sweeperHolder(); got != first {
		t.Fatalf("the sweeper changed from %q to %q while it ran", first, got)
	}

	a.Close() // a was the only driver when the sweeper was elected
	if h := sweeperHolder(); h == first {
		t.Fatalf("the sweeper's Lease still names the closed driver")
	}
	waitFor("another sweeper elected", func() bool { return sweeperHolder() != "" })
	waitFor("the crashed registration swept", func() bool {
		_, lerr := leases.Get(ctx, crashed, metav1.GetOptions{})
		_, serr := cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, crashed, metav1.GetOptions{})
		return apierrors.IsNotFound(lerr) && apierrors.IsNotFound(serr)
	})
}
