package kubetest

import (
	"context"
	"hash/crc32"
	"net"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kube "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// harnessNamespace survives Restart(keepData=false): the apiserver
// recreates it on empty storage.
const harnessNamespace = "default"

// URL returns a k8s:// URL that reaches the apiserver at addr through a
// kubeconfig written for it, in namespace, with extra options appended.
func (s *Server) URL(addr, namespace string, options ...string) (string, error) {
	return s.URLFor(Access{Addr: addr, Namespace: namespace}, options...)
}

// URLFor returns a k8s:// URL through a kubeconfig written by
// KubeconfigFor(a), with extra options appended.
func (s *Server) URLFor(a Access, options ...string) (string, error) {
	kc, err := s.KubeconfigFor(a)
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
// proxy per linked client, closed with s), Restarter, Wiper,
// ExternalDeleter and Tenants (a namespace per tenant, TenantNamespace).
func NewHarness(s *Server) conformance.Harness { return &harness{s: s, ns: harnessNamespace} }

// NewLimitedHarness returns a conformance.Harness whose registries act as
// LimitedUser in namespace, which the caller has created and in which it
// has bound the Role under test to LimitedUser. Its hooks act as the
// administrator: Partitioner, Wiper and ExternalDeleter; not Restarter (a
// restart that loses the data loses the Role) nor Tenants.
func NewLimitedHarness(s *Server, namespace string) conformance.Harness {
	return limitedHarness{&harness{s: s, ns: namespace, token: LimitedToken}}
}

// harness acts in namespace ns; its registries as the user of token
// (Token when empty), its hooks as the administrator.
type harness struct {
	s     *Server
	ns    string
	token string
}

func (h *harness) open(ctx context.Context, addr string) (driver.Driver, error) {
	return h.openIn(ctx, addr, h.ns)
}

func (h *harness) openIn(ctx context.Context, addr, namespace string) (driver.Driver, error) {
	u, err := h.urlIn(addr, namespace)
	if err != nil {
		return nil, err
	}
	return backend.OpenURL(ctx, u)
}

func (h *harness) urlIn(addr, namespace string) (string, error) {
	return h.s.URLFor(Access{Addr: addr, Namespace: namespace, Token: h.token}, "sweep_interval=1s", "request_timeout=2s")
}

// URL is the k8s:// URL of the harness's registries, through a kubeconfig
// written for them ("" if it cannot be written: the suite then fails to
// open the observer, naming the URL).
func (h *harness) URL() string {
	u, _ := h.urlIn(h.s.Addr(), h.ns)
	return u
}

// TenantNamespace is the namespace of a conformance tenant: Kubernetes'
// unit of isolation. One namespace cannot be split between tenants: every
// Roster registry of a namespace sees all of its services, and RBAC grants
// on endpointslices and leases by namespace (resourceNames cannot cover
// objects named by a hash of the instance).
func TenantNamespace(tenant string) string { return "roster-conformance-" + tenant }

// MakeTenantDriver implements conformance.Tenants: a driver in the
// tenant's namespace, created when missing (the namespace lifecycle
// admission refuses objects in a namespace that does not exist).
func (h *harness) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	ns := TenantNamespace(tenant)
	if err := h.s.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	return h.openIn(ctx, h.s.Addr(), ns)
}

// TenantsShareNames is true: each namespace holds its own service names.
func (h *harness) TenantsShareNames() bool { return true }

// EnsureNamespace creates namespace ns as the administrator unless it
// exists.
func (s *Server) EnsureNamespace(ctx context.Context, ns string) error {
	cs, err := s.Clientset(s.Addr())
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// limitedHarness hides the hooks a limited user's harness does not have.
type limitedHarness struct{ h *harness }

func (l limitedHarness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return l.h.MakeDriver(ctx)
}
func (l limitedHarness) URL() string                    { return l.h.URL() }
func (l limitedHarness) Config() conformance.Config     { return l.h.Config() }
func (l limitedHarness) Wipe(ctx context.Context) error { return l.h.Wipe(ctx) }
func (l limitedHarness) MakeLinkedDriver(ctx context.Context) (driver.Driver, conformance.Link, error) {
	return l.h.MakeLinkedDriver(ctx)
}
func (l limitedHarness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	return l.h.DeleteExternally(ctx, in)
}

func (h *harness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return h.open(ctx, h.s.Addr())
}

// Config: Leases are whole seconds and checked by the readers' clocks, so
// expiry is sharp; the bounds leave room for a loaded 2-core machine.
func (h *harness) Config() conformance.Config {
	c := conformance.LoadedMachine()
	c.ResyncInterval = 5 * time.Second
	// Each registration is two to four calls, within the lease engine's
	// 1s call bound at TTL 3s, to one apiserver on a loaded 2-core
	// machine: 200 at once overran it under -race there.
	c.ManyLeases = 100
	return c
}

// MakeLinkedDriver makes a driver through a TCP proxy of its own.
func (h *harness) MakeLinkedDriver(ctx context.Context) (driver.Driver, conformance.Link, error) {
	return h.s.proxies.MakeLinkedDriver(h.s.Addr(), func(addr string) (driver.Driver, error) { return h.open(ctx, addr) })
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
	if err := cs.DiscoveryV1().EndpointSlices(h.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return cs.CoordinationV1().Leases(h.ns).Delete(ctx, name, metav1.DeleteOptions{})
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
	if err := cs.DiscoveryV1().EndpointSlices(h.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, all); err != nil {
		return err
	}
	return cs.CoordinationV1().Leases(h.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
}

// WriteForeign writes in as another controller would: an EndpointSlice
// of the service, not Roster's, named to sort first, whose endpoint
// names in.ID as its Pod, with no Lease behind it.
func (h *harness) WriteForeign(ctx context.Context, in registry.Instance) (func(context.Context) error, error) {
	host, portS, err := net.SplitHostPort(in.Address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseInt(portS, 10, 32)
	if err != nil {
		return nil, err
	}
	cs, err := h.s.Clientset(h.s.Addr())
	if err != nil {
		return nil, err
	}
	name := "0-foreign-" + strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(in.Service+"/"+in.ID))), 16)
	p := int32(port)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{discoveryv1.LabelServiceName: in.Service, discoveryv1.LabelManagedBy: "another-tool.example"},
			Annotations: map[string]string{kubernetes.AnnotationWeight: strconv.FormatUint(uint64(in.Weight), 10)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &p}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: h.ns, Name: in.ID}}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(h.ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return cs.DiscoveryV1().EndpointSlices(h.ns).Delete(ctx, name, metav1.DeleteOptions{})
	}, nil
}
