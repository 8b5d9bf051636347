package kubernetes_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kube "k8s.io/client-go/kubernetes"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// startControllers runs the real EndpointSlice controller against the
// package's apiserver, once.
var startControllers = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return server.StartControllers(ctx, "endpointslice")
})

// cluster is a namespace where the EndpointSlice controller derives the
// slices of a Service from Pods, as in a cluster; the test is the kubelet.
type cluster struct {
	t  *testing.T
	cs kube.Interface
	ns string
}

// newCluster starts the controller (once) and creates a fresh namespace
// and a Node in zone-a for its Pods.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	if err := startControllers(); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, cs: testClientset(t), ns: fmt.Sprintf("ctl-%d", time.Now().UnixNano())}
	if _, err := c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The serviceaccount controller would create it; admission wants it.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.cs.CoreV1().ServiceAccounts(c.ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.ns + "-node",
		Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}}
	if _, err := c.cs.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	return c
}

// service creates Service name selecting app=name, ports metrics (9090)
// then http (80 to 8080), the order that made the first port wrong.
func (c *cluster) service(name string) {
	c.t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": name},
		Ports: []corev1.ServicePort{
			{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)},
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		}}}
	if _, err := c.cs.CoreV1().Services(c.ns).Create(c.t.Context(), svc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// pod creates Pod name of app with the version label, on the Node, and
// reports it Running and Ready at ip as a kubelet would.
func (c *cluster) pod(name, app, version, ip string) {
	c.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app, "version": version}},
		Spec: corev1.PodSpec{NodeName: c.ns + "-node", Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:" + version,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}}}},
	}
	p, err := c.cs.CoreV1().Pods(c.ns).Create(c.t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	c.setReady(p, true)
}

// setReady sets the Pod's Ready condition through the status subresource.
func (c *cluster) setReady(p *corev1.Pod, ready bool) {
	c.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
	}
	if _, err := c.cs.CoreV1().Pods(c.ns).UpdateStatus(c.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// podReady changes the Ready condition of Pod name.
func (c *cluster) podReady(name string, ready bool) {
	c.t.Helper()
	p, err := c.cs.CoreV1().Pods(c.ns).Get(c.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.setReady(p, ready)
}

// controllerWrote fails the test unless the slices of service are the
// EndpointSlice controller's, with no Roster annotation.
func (c *cluster) controllerWrote(service string) {
	c.t.Helper()
	l, err := c.cs.DiscoveryV1().EndpointSlices(c.ns).List(c.t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil || len(l.Items) == 0 {
		c.t.Fatalf("slices of %s: %d, %v", service, len(l.Items), err)
	}
	for _, s := range l.Items {
		if by := s.Labels[discoveryv1.LabelManagedBy]; by != "endpointslice-controller.k8s.io" {
			c.t.Errorf("slice %s managed by %q, not the controller", s.Name, by)
		}
		for k := range s.Annotations {
			if strings.HasPrefix(k, "roster.dev/") {
				c.t.Errorf("slice %s has annotation %s", s.Name, k)
			}
		}
	}
}

// registry opens a registry on the namespace with extra URL options.
func (c *cluster) registry(options ...string) *registry.Registry {
	c.t.Helper()
	u, err := server.URL(server.Addr(), c.ns, options...)
	if err != nil {
		c.t.Fatal(err)
	}
	r, err := registry.Open(context.Background(), u)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { r.Close() })
	return r
}

// waitFor reads w until ok holds for a snapshot, and returns it.
func waitFor(ctx context.Context, t *testing.T, w *registry.Watcher, what string, ok func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	var last registry.Snapshot
	for {
		sn, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch never showed %s: %v; last %+v", what, err, last.Instances)
		}
		if ok(sn) {
			return sn
		}
		last = sn
	}
}

// TestControllerSlices is a Deployment's Pods as a cluster serves them:
// the real EndpointSlice controller writes the slices of a Service with
// ports [metrics, http] from Pods labelled version=v1 and v2, and no
// Roster annotation anywhere. Calls reach the http port only, a version
// route reaches v2 only, and a Pod that stops being ready leaves.
func TestControllerSlices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newCluster(t)
	c.service("web")
	c.pod("web-1", "web", "v1", "10.1.0.1")
	c.pod("web-2", "web", "v1", "10.1.0.2")
	c.pod("web-3", "web", "v2", "10.1.0.3")
	r := c.registry()
	w, err := r.Watch(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sn := waitFor(ctx, t, w, "3 Pods", func(sn registry.Snapshot) bool { return len(sn.Instances) == 3 })
	c.controllerWrote("web")
	for i, in := range sn.Instances {
		ip := fmt.Sprintf("10.1.0.%d", i+1)
		want := registry.Instance{ID: fmt.Sprintf("web-%d", i+1), Service: "web", Address: ip + ":8080",
			Version: map[bool]string{true: "v2", false: "v1"}[i == 2], Zone: "zone-a", Weight: registry.DefaultWeight,
			Metadata:  map[string]string{"node": c.ns + "-node"},
			Endpoints: []registry.Endpoint{{Name: "http", Address: ip + ":8080"}, {Name: "metrics", Address: ip + ":9090"}}}
		if !in.Equal(want) {
			t.Errorf("instance %d =\n %+v, want\n %+v", i, in, want)
		}
	}

	mc, err := middleware.NewClient(r)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	calls := func(ctx context.Context, n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			err := mc.Do(ctx, "web", func(_ context.Context, in registry.Instance) error {
				ep, ok := in.Endpoint("http")
				if !ok || ep.Address != in.Address {
					t.Errorf("%s: http endpoint %v, %v; want the primary %s", in.ID, ep, ok, in.Address)
				}
				got[in.ID+" "+in.Address]++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	got := calls(ctx, 60)
	for k := range got {
		if !slices.Contains([]string{"web-1 10.1.0.1:8080", "web-2 10.1.0.2:8080", "web-3 10.1.0.3:8080"}, k) {
			t.Errorf("a call reached %s, not an http port", k)
		}
	}
	if len(got) != 3 {
		t.Errorf("60 calls reached %v; want all 3 Pods' http ports", got)
	}
	got = calls(selector.WithRoute(ctx, selector.Route{Version: "v2"}), 30)
	if len(got) != 1 || got["web-3 10.1.0.3:8080"] != 30 {
		t.Errorf("30 calls routed to v2 reached %v; want web-3 only", got)
	}

	c.podReady("web-1", false)
	waitFor(ctx, t, w, "web-1 gone", func(sn registry.Snapshot) bool {
		_, ok := sn.Find("web-1")
		return !ok && len(sn.Instances) == 2
	})
	l, err := r.Lookup(ctx, "web")
	if err != nil || len(l.Instances) != 2 || l.Instances[0].ID != "web-2" || l.Instances[1].Version != "v2" {
		t.Fatalf("Lookup = %+v, %v; want web-2 (v1) and web-3 (v2)", l.Instances, err)
	}
}

// TestControllerPodLabels: a Pod's labels and annotations changing, with
// no slice changing, reach watchers (the Pod informer wakes them) and
// Lookup: version, weight and tags come from the Pod.
func TestControllerPodLabels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newCluster(t)
	c.service("api")
	c.pod("api-1", "api", "v1", "10.2.0.1")
	r := c.registry()
	w, err := r.Watch(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	waitFor(ctx, t, w, "api-1 at v1", func(sn registry.Snapshot) bool {
		return len(sn.Instances) == 1 && sn.Instances[0].Version == "v1"
	})
	p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, "api-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["app.kubernetes.io/version"] = "2.0.1"
	p.Annotations = map[string]string{kubernetes.AnnotationWeight: "7", kubernetes.AnnotationTags: "canary, eu"}
	if _, err := c.cs.CoreV1().Pods(c.ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := func(in registry.Instance) bool {
		return in.Version == "2.0.1" && in.Weight == 7 && slices.Equal(in.Tags, []string{"canary", "eu"})
	}
	// The Pod's event wakes the watch at once (0.04s here); without it
	// only the registry's periodic resync would, up to a minute later.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	waitFor(wctx, t, w, "api-1 at 2.0.1, weight 7, tags canary and eu within 10s", func(sn registry.Snapshot) bool {
		return len(sn.Instances) == 1 && want(sn.Instances[0])
	})
	l, err := r.Lookup(ctx, "api")
	if err != nil || len(l.Instances) != 1 || !want(l.Instances[0]) {
		t.Fatalf("Lookup = %+v, %v; want the Pod's version, weight and tags", l.Instances, err)
	}
}

// TestControllerTerminating: a Pod deleted with a grace period (no
// kubelet ends it) is terminating but still serving: weight 0, picked
// only when nothing else is left, as kube-proxy does. Once it stops
// being ready it serves no more and leaves.
func TestControllerTerminating(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newCluster(t)
	c.service("shop")
	c.pod("shop-1", "shop", "v1", "10.3.0.1")
	c.pod("shop-2", "shop", "v1", "10.3.0.2")
	w, err := c.registry().Watch(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	waitFor(ctx, t, w, "2 Pods", func(sn registry.Snapshot) bool { return len(sn.Instances) == 2 })
	grace := int64(600)
	if err := c.cs.CoreV1().Pods(c.ns).Delete(ctx, "shop-1", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, w, "shop-1 terminating at weight 0", func(sn registry.Snapshot) bool {
		in, ok := sn.Find("shop-1")
		return ok && in.Weight == 0 && len(sn.Instances) == 2 && sn.Instances[1].Weight == registry.DefaultWeight
	})
	c.podReady("shop-1", false)
	waitFor(ctx, t, w, "shop-1 gone", func(sn registry.Snapshot) bool {
		_, ok := sn.Find("shop-1")
		return !ok && len(sn.Instances) == 1
	})
}

// TestControllerPortOption: ?port= names the primary; every port stays
// a named endpoint.
func TestControllerPortOption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newCluster(t)
	c.service("mon")
	c.pod("mon-1", "mon", "v1", "10.4.0.1")
	w, err := c.registry("port=metrics").Watch(ctx, "mon")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sn := waitFor(ctx, t, w, "mon-1", func(sn registry.Snapshot) bool { return len(sn.Instances) == 1 })
	in := sn.Instances[0]
	http, ok := in.Endpoint("http")
	if in.Address != "10.4.0.1:9090" || !ok || http.Address != "10.4.0.1:8080" {
		t.Fatalf("mon-1 = %+v; want primary 10.4.0.1:9090 (metrics) and http at 10.4.0.1:8080", in)
	}
}

// TestPodsForbidden: an identity that may not list Pods (the documented
// Role less its pods rule) still discovers the Pods, from their slices
// only (no version), and the driver says so once, not per call.
func TestPodsForbidden(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newCluster(t)
	role := docRole(t)
	role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods") })
	grant(t, c.ns, role)
	c.service("cart")
	c.pod("cart-1", "cart", "v1", "10.5.0.1")
	var log logbuf.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(log.Logger())
	r := openLimited(t, c.ns)
	w, err := r.Watch(ctx, "cart")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sn := waitFor(ctx, t, w, "cart-1", func(sn registry.Snapshot) bool { return len(sn.Instances) == 1 })
	if in := sn.Instances[0]; in.Address != "10.5.0.1:8080" || in.Version != "" {
		t.Errorf("cart-1 = %+v; want 10.5.0.1:8080 with no version (slices only)", in)
	}
	for range 2 {
		l, err := r.Lookup(ctx, "cart")
		if err != nil || len(l.Instances) != 1 {
			t.Fatalf("Lookup = %+v, %v; want cart-1", l.Instances, err)
		}
	}
	if n := strings.Count(log.String(), "may not list Pods"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, log.String())
	}
}
