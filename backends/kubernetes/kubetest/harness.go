package kubetest

import (
	"context"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kube "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
)

// harnessNamespace survives Restart(keepData=false): the apiserver
// recreates it on empty storage.
const harnessNamespace = "default"

// URL returns a k8s:// URL that reaches the apiserver at addr through a
// kubeconfig written for it, in namespace, with extra options appended.
func (s *Server) URL(addr, namespace string, options ...string) (string, error) {
	kc, err := s.Kubeconfig(addr, namespace)
	if err != nil {
		return "", err
	}
	u := "k8s://?kubeconfig=" + url.QueryEscape(kc)
	for _, o := range options {
		u += "&" + o
	}
	return u, nil
}

// NewHarness returns a conformance.Harness on s with Partitioner (a TCP
// proxy per linked client, closed with s), Restarter, Wiper and
// ExternalDeleter.
func NewHarness(s *Server) conformance.Harness { return &harness{s: s} }

type harness struct{ s *Server }

func (h *harness) open(ctx context.Context, addr string) (*registry.Registry, error) {
	u, err := h.s.URL(addr, harnessNamespace, "sweep_interval=1s", "request_timeout=2s")
	if err != nil {
		return nil, err
	}
	return registry.Open(ctx, u, registry.WithResyncInterval(5*time.Second))
}

func (h *harness) Open(ctx context.Context) (*registry.Registry, error) {
	return h.open(ctx, h.s.Addr())
}

// Config: Leases are whole seconds and checked by the readers' clocks, so
// expiry is sharp; the bounds leave room for a loaded 2-core machine.
func (h *harness) Config() conformance.Config {
	c := conformance.LoadedMachine()
	// Each registration is two to four calls, within the lease engine's
	// 1s call bound at TTL 3s, to one apiserver on a loaded 2-core
	// machine: 200 at once overran it under -race there.
	c.ManyLeases = 100
	return c
}

// OpenLinked opens a Registry through a TCP proxy of its own.
func (h *harness) OpenLinked(ctx context.Context) (*registry.Registry, conformance.Link, error) {
	return h.s.proxies.OpenLinked(h.s.Addr(), func(addr string) (*registry.Registry, error) { return h.open(ctx, addr) })
}

func (h *harness) Restart(ctx context.Context, keepData bool) error {
	return h.s.Restart(ctx, keepData)
}

// DeleteExternally deletes the instance's EndpointSlice and Lease, as an
// operator's kubectl would.
func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	cs, err := h.s.Clientset(h.s.Addr())
	if err != nil {
		return err
	}
	name := kubernetes.ObjectName(in.Service, in.ID)
	if err := cs.DiscoveryV1().EndpointSlices(harnessNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return cs.CoordinationV1().Leases(harnessNamespace).Delete(ctx, name, metav1.DeleteOptions{})
}

// Clientset returns a client of the apiserver at addr as the test user.
func (s *Server) Clientset(addr string) (kube.Interface, error) {
	kc, err := s.Kubeconfig(addr, harnessNamespace)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	return kube.NewForConfig(cfg)
}

// Wipe deletes every EndpointSlice and Lease of the harness's namespace
// while the apiserver runs, as an operator's cleanup script would.
func (h *harness) Wipe(ctx context.Context) error {
	cs, err := h.s.Clientset(h.s.Addr())
	if err != nil {
		return err
	}
	all := metav1.ListOptions{}
	if err := cs.DiscoveryV1().EndpointSlices(harnessNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all); err != nil {
		return err
	}
	return cs.CoordinationV1().Leases(harnessNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
}
