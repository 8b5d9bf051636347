// Package kubernetes is Roster's Kubernetes backend, on client-go. Import
// it for its side effect and open a registry by URL with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/kubernetes"
//
//	reg, err := registry.Open(ctx, "k8s://?namespace=shop")            // kubeconfig
//	reg, err := registry.Open(ctx, "k8s://in-cluster?namespace=shop")  // inside a pod
//
// k8s:// finds its configuration as kubectl does. k8s://in-cluster uses
// the pod's service account. Credentials never come from the URL, and
// errors never contain a token. [New] builds a driver from [Options]
// instead, and [ParseURL] reads them from a URL.
//
// Discovery reads the EndpointSlices labelled
// kubernetes.io/service-name=<service>, whoever wrote them. So a Service's
// Pods are instances with no Roster code in them. A ready endpoint is an
// instance. A terminating one that still serves has weight 0. One that
// does not serve is left out. Each port of the Service is a named
// endpoint of the instance. The primary is the port option's, else
// "http", else the first. Version, weight and tags come from the Pod's
// labels and annotations when the driver may list Pods, else from the
// slice alone. Lookup reads the apiserver, and Watch runs shared
// informers.
//
// Processes outside the cluster, such as VMs, register too. Register
// writes a coordination.k8s.io Lease for the TTL and an EndpointSlice
// that the Lease owns. [ObjectName] gives both names. A heartbeat renews
// the Lease. If it finds either object gone or replaced, it returns
// registry.ErrNotFound and the lease registers again. Readers ignore a slice whose Lease has lapsed, so a crashed
// instance leaves watchers at its TTL. The registrants of a namespace elect
// one sweeper (the Lease roster-sweeper), which deletes lapsed registrations
// each sweep_interval. Expiry compares the writer's clock
// with the reader's, so keep clocks in sync.
//
// The client's rate limit is 200 requests a second by default, option
// qps. A heartbeat costs two requests, so that is about 300 leases at TTL
// 10s.
//
// docs/backends/kubernetes.md has every option, the RBAC rules, the
// guarantees and the measurements.
//
// Errors wrap registry.ErrInvalid for a request the apiserver rejects and
// registry.ErrUnavailable for an outage. A failed informer fails every
// watch of the driver, and the registry reopens them.
package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"

	coordv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/roster-go/roster/registry/driver"
)

// Scheme is the URL scheme of this backend.
const Scheme = "k8s"

// Defaults of Options.
const (
	defaultRequestTimeout = 5 * time.Second
	defaultSweepInterval  = 10 * time.Second
)

// Annotations an operator may set on a Pod, or on a Service's
// EndpointSlices for all their endpoints. A Pod's win. Tags are
// comma-separated. AnnotationRegion is the instances' Region (an
// EndpointSlice has a zone per endpoint, but no region); the slices
// Roster writes carry it too.
const (
	AnnotationWeight  = "roster.dev/weight"
	AnnotationVersion = "roster.dev/version"
	AnnotationTags    = "roster.dev/tags"
	AnnotationRegion  = "roster.dev/region"
)

// Labels and annotations of the slices and Leases Roster writes.
const (
	managedBy           = "roster.dev" // value of endpointslice.kubernetes.io/managed-by
	labelLeaseService   = "roster.dev/service"
	annotationInstance  = "roster.dev/instance"
	annotationLease     = "roster.dev/lease"
	labelLeaseManagedBy = "app.kubernetes.io/managed-by"
)

// Lease durations are whole seconds in an int32 (leaseDurationSeconds):
// a longer TTL would wrap, to a short lease or one the apiserver refuses,
// so it is rejected before anything is written.
var limits = driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second, MaxTTL: math.MaxInt32 * time.Second}

func init() { driver.Register(Scheme, openURL, publicOptions...) }

// Options configure a Driver opened with New.
type Options struct {
	// Config reaches the apiserver. A zero QPS is raised to 200 (burst
	// 400): client-go's default of 5 would throttle heartbeats.
	Config *rest.Config
	// Namespace of the services, default "default".
	Namespace string
	// RequestTimeout bounds each call; default 5s.
	RequestTimeout time.Duration
	// SweepInterval: how often the namespace's elected sweeper deletes
	// expired registrations, and the other registrants check it is
	// alive; default 10s.
	SweepInterval time.Duration
	// Port names the primary port of a Service's endpoints, where a
	// Service has it; else the port named "http" is, else the first.
	// Every port is a named endpoint either way.
	Port string
}

// Driver is a driver.Driver on a Kubernetes namespace. Wrap it with
// registry.New, or get one through registry.Open with a k8s:// URL.
type Driver struct {
	cs     kubernetes.Interface
	ns     string
	reqT   time.Duration
	sweepT time.Duration
	port   string // Options.Port
	closed atomic.Bool
	local  bool // the apiserver is on this host

	podsForbidden atomic.Bool // the apiserver refused to list Pods: slices only
	warnPods      sync.Once

	mu        sync.Mutex
	inf       *generation // nil until the first Watch; replaced after a failure
	sweeping  bool
	stopSweep chan struct{}
	sw        sweeper // owned by the sweep goroutine
	wg        sync.WaitGroup
}

// New returns a Driver. It does not contact the apiserver: an unreachable
// one shows as ErrUnavailable on the first calls.
func New(opts Options) (*Driver, error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("k8s: %w: no client configuration", driver.ErrInvalid)
	}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 200, 400
	}
	if cfg.WarningHandler == nil && cfg.WarningHandlerWithContext == nil {
		// The apiserver warns on every FQDN slice (loopback addresses,
		// see addressType); a library does not write to the process log.
		cfg.WarningHandler = rest.NoWarnings{}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s: %w: %v", driver.ErrInvalid, err)
	}
	d := &Driver{cs: cs, ns: opts.Namespace, reqT: opts.RequestTimeout, sweepT: opts.SweepInterval, port: opts.Port, stopSweep: make(chan struct{})}
	d.local = backend.LocalHosts(cfg.Host)
	if d.ns == "" {
		d.ns = "default"
	}
	if d.port != "" && !portName(d.port) {
		return nil, fmt.Errorf("k8s: %w: port %q: want a port name, [a-z0-9]([a-z0-9-]*[a-z0-9])? of at most %d bytes", driver.ErrInvalid, d.port, backend.MaxEndpointNameLen)
	}
	if d.reqT <= 0 {
		d.reqT = defaultRequestTimeout
	}
	if d.sweepT <= 0 {
		d.sweepT = defaultSweepInterval
	}
	return d, nil
}

// Limits implements driver.Driver.
func (d *Driver) Limits() driver.Limits { return limits }

// Local reports whether the apiserver is on this host: then loopback
// addresses are served (see registry.AllowLoopback).
func (d *Driver) Local() bool { return d.local }

// Close stops the informers and the sweeper.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	close(d.stopSweep)
	inf := d.inf
	d.inf = nil
	d.mu.Unlock()
	if inf != nil {
		inf.stop()
	}
	d.wg.Wait()
	d.releaseSweeper()
	return nil
}

func (d *Driver) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.reqT)
}

// ObjectName is the name of the Lease and slice of one registration: a
// hash, since IDs and service names may hold characters names may not.
func ObjectName(service, id string) string {
	h := sha256.Sum256([]byte(service + "/" + id))
	return "roster-" + hex.EncodeToString(h[:10])
}

// wrap adds the operation to a client error, and to a TLS failure the
// fix of its cause (the kubeconfig's CA or client certificate).
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if cause, ok := backend.TLSCause(err); ok {
		return fmt.Errorf("k8s: %s: %s%w", op, strings.TrimSuffix(cause, err.Error()), err)
	}
	return fmt.Errorf("k8s: %s: %w", op, err)
}

// ErrorKind implements driver.Driver. A missing object is ErrNotFound. A
// request the apiserver refuses (RBAC, validation, size) and a TLS
// failure are ErrInvalid: a retry cannot succeed.
func (d *Driver) ErrorKind(err error) error { return errorKind(err) }

func errorKind(err error) error {
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsGone(err):
		return driver.ErrNotFound
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err),
		apierrors.IsUnauthorized(err), apierrors.IsRequestEntityTooLargeError(err), apierrors.IsMethodNotSupported(err):
		return driver.ErrInvalid
	}
	if _, ok := backend.TLSCause(err); ok {
		return driver.ErrInvalid
	}
	return driver.ErrUnavailable
}

// parseRV reads a resourceVersion; Kubernetes calls it opaque, but on etcd
// it is the store's revision, which is what Snapshot.Revision wants.
func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// addressType is the EndpointSlice address type of host. The apiserver
// refuses loopback, link-local and unspecified IPs in IPv4 and IPv6
// slices, so those are written as FQDN slices, which kube-proxy ignores
// (such an address means nothing inside the cluster); Roster reads the
// instance from its annotation either way.
func addressType(host string) discoveryv1.AddressType {
	ip := net.ParseIP(host)
	switch {
	case ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified():
		return discoveryv1.AddressTypeFQDN
	case ip.To4() != nil:
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// expiry is when a Lease lapses, or the zero time if it carries no renewal.
func expiry(l *coordv1.Lease) time.Time {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
}
