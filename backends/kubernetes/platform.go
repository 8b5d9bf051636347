package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/roster-go/roster/internal/backend"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roster-go/roster/registry/driver"
)

// Pod labels read for an instance's version, in this order after the
// AnnotationVersion annotation: the recommended label, then Istio's.
const (
	labelAppVersion = "app.kubernetes.io/version"
	labelVersion    = "version"
)

// primaryPort is the port name a Service's primary defaults to, when
// Options.Port is empty or the slice has no port of that name.
const primaryPort = "http"

// platform is how the slices other controllers wrote are read: the
// primary port's name, and the Pods' labels when the driver may read them.
type platform struct {
	port string                        // Options.Port
	pod  func(name string) *corev1.Pod // nil: no Pod data, slices only
}

// instances reads the endpoints of a slice another controller (the
// endpointslice controller, a mirror) wrote: one instance per endpoint,
// its ports the instance's named endpoints.
func (p platform) instances(service string, s *discoveryv1.EndpointSlice) []driver.Instance {
	ports := primaryFirst(slicePorts(s.Ports), p.port)
	if len(ports) == 0 {
		return nil
	}
	if len(ports) > backend.MaxEndpoints {
		ports = ports[:backend.MaxEndpoints] // the primary kept
	}
	weight := parseWeight(s.Annotations[AnnotationWeight], backend.DefaultWeight)
	var out []driver.Instance
	for _, e := range s.Endpoints {
		if len(e.Addresses) == 0 {
			continue
		}
		in := p.instance(service, s, e, ports, weight)
		w, ok := endpointWeight(e.Conditions, in.Weight)
		if !ok {
			continue
		}
		in.Weight = w
		out = append(out, in)
	}
	return out
}

// instance is the instance of endpoint e, before its conditions apply.
func (p platform) instance(service string, s *discoveryv1.EndpointSlice, e discoveryv1.Endpoint, ports []discoveryv1.EndpointPort, weight uint32) driver.Instance {
	host := e.Addresses[0]
	// Without a Pod to name it, an endpoint is known by its address
	// ("fd00::1" is no ID: the registry would skip it).
	in := driver.Instance{ID: backend.AddressID(host), Service: service,
		Address: net.JoinHostPort(host, strconv.Itoa(int(*ports[0].Port))),
		Version: s.Annotations[AnnotationVersion], Region: s.Annotations[AnnotationRegion], Weight: weight}
	if len(ports) > 1 {
		// One port is a one-port process, as before: it serves every name.
		in.Endpoints = make([]driver.Endpoint, len(ports))
		for i, sp := range ports {
			in.Endpoints[i] = driver.Endpoint{Name: *sp.Name, Address: net.JoinHostPort(host, strconv.Itoa(int(*sp.Port))), Protocol: protocol(sp)}
		}
	}
	if e.TargetRef != nil && e.TargetRef.Name != "" {
		in.ID = e.TargetRef.Name
	}
	if e.Zone != nil {
		in.Zone = *e.Zone
	}
	if e.NodeName != nil && *e.NodeName != "" {
		in.Metadata = map[string]string{"node": *e.NodeName}
	}
	if pod := p.podOf(e); pod != nil {
		fromPod(&in, pod)
	}
	return in
}

// podOf is the Pod behind e, if the driver reads Pods and it is the same
// Pod (a StatefulSet's Pod recreated under its name has another UID).
func (p platform) podOf(e discoveryv1.Endpoint) *corev1.Pod {
	if p.pod == nil || e.TargetRef == nil || e.TargetRef.Kind != "Pod" || e.TargetRef.Name == "" {
		return nil
	}
	pod := p.pod(e.TargetRef.Name)
	if pod == nil || (e.TargetRef.UID != "" && pod.UID != e.TargetRef.UID) {
		return nil
	}
	return pod
}

// fromPod sets the version, region, weight and tags a Pod's labels and
// annotations give; each falls back to what the slice said.
func fromPod(in *driver.Instance, pod *corev1.Pod) {
	if r := pod.Annotations[AnnotationRegion]; r != "" {
		in.Region = r
	}
	for _, v := range []string{pod.Annotations[AnnotationVersion], pod.Labels[labelAppVersion], pod.Labels[labelVersion]} {
		if v != "" {
			in.Version = v
			break
		}
	}
	in.Weight = parseWeight(pod.Annotations[AnnotationWeight], in.Weight)
	for t := range strings.SplitSeq(pod.Annotations[AnnotationTags], ",") {
		if t = strings.TrimSpace(t); t != "" {
			in.Tags = append(in.Tags, t)
		}
	}
}

// parseWeight reads a weight annotation, def when absent or malformed.
func parseWeight(s string, def uint32) uint32 {
	w, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return def
	}
	// Past the portable limit the registry would skip the instance: an
	// operator's 100000 means "as heavy as can be".
	return uint32(min(w, backend.MaxWeight))
}

// slicePorts are the usable ports of a slice, in its order (the
// Service's): with a number, and a name an endpoint may carry. A port
// whose name is not one is dropped, not the whole instance.
func slicePorts(in []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, 0, len(in))
	for _, p := range in {
		if p.Port == nil {
			continue
		}
		if len(in) > 1 && (p.Name == nil || !portName(*p.Name) || hasPort(out, *p.Name)) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func hasPort(ports []discoveryv1.EndpointPort, name string) bool {
	for _, p := range ports {
		if p.Name != nil && *p.Name == name {
			return true
		}
	}
	return false
}

// primaryFirst moves the primary port first: the port named want, else
// the one named "http", else the slice's first (the Service's first).
func primaryFirst(ports []discoveryv1.EndpointPort, want string) []discoveryv1.EndpointPort {
	for _, name := range []string{want, primaryPort} {
		for i, p := range ports {
			if name != "" && p.Name != nil && *p.Name == name {
				if i == 0 {
					return ports
				}
				out := make([]discoveryv1.EndpointPort, 0, len(ports))
				out = append(out, p)
				out = append(out, ports[:i]...)
				return append(out, ports[i+1:]...)
			}
		}
	}
	return ports
}

// protocol is an endpoint's protocol: the port's appProtocol when it is
// one Roster can carry ("http", "grpc"; not "kubernetes.io/h2c"), else
// "udp" or "sctp" for those ports, else none (TCP).
func protocol(p discoveryv1.EndpointPort) string {
	if p.AppProtocol != nil && protocolName(strings.ToLower(*p.AppProtocol)) {
		return strings.ToLower(*p.AppProtocol) // "HTTP" is http
	}
	if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
		return strings.ToLower(string(*p.Protocol))
	}
	return ""
}

// portName reports whether a port name is a valid endpoint name:
// [a-z0-9]([a-z0-9-]*[a-z0-9])? of at most 15 bytes, as Kubernetes'
// own port names are.
func portName(s string) bool {
	if s == "" || len(s) > backend.MaxEndpointNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		inner := c == '-' && i > 0 && i < len(s)-1
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || inner) {
			return false
		}
	}
	return true
}

// protocolName reports whether s is a valid endpoint protocol.
func protocolName(s string) bool {
	if len(s) > backend.MaxProtocolLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}

// endpointWeight applies the conditions as kube-proxy does. Ready (nil
// means ready) and not terminating serves at weight. Serving but not
// ready (terminating, draining) serves at 0, so only when nothing else
// is left. Not serving is left out.
func endpointWeight(c discoveryv1.EndpointConditions, weight uint32) (uint32, bool) {
	ready := c.Ready == nil || *c.Ready
	terminating := c.Terminating != nil && *c.Terminating
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	switch {
	case ready && !terminating:
		return weight, true
	case serving:
		return 0, true
	}
	return 0, false
}

// hasPods reports whether any slice of another controller names a Pod.
func hasPods(sl []*discoveryv1.EndpointSlice) bool {
	for _, s := range sl {
		if s.Labels[discoveryv1.LabelManagedBy] == managedBy {
			continue
		}
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				return true
			}
		}
	}
	return false
}

// listPlatform is List's platform: the namespace's Pods read once, when
// the slices name Pods and the driver may read them.
func (d *Driver) listPlatform(ctx context.Context, sl []*discoveryv1.EndpointSlice) (platform, error) {
	p := platform{port: d.port}
	if d.podsForbidden.Load() || !hasPods(sl) {
		return p, nil
	}
	ctx, cancel := d.call(ctx)
	defer cancel()
	l, err := d.cs.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{})
	if d.forbidPods(err) {
		return p, nil
	}
	if err != nil {
		return p, wrap("list pods", err)
	}
	pods := make(map[string]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		pods[l.Items[i].Name] = &l.Items[i]
	}
	p.pod = func(name string) *corev1.Pod { return pods[name] }
	return p, nil
}

// forbidPods reports whether err is the apiserver refusing to show Pods.
// The driver then reads slices only, for the rest of its life, and says
// so once.
func (d *Driver) forbidPods(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	d.podsForbidden.Store(true)
	d.warnPods.Do(func() {
		slog.Default().Warn("roster: k8s: may not list Pods in namespace "+d.ns+
			": Pods' version, weight and tags are not read, slices only (docs/backends/kubernetes.md, RBAC)",
			"error", err.Error())
	})
	return true
}

// errPodsForbidden ends a generation whose Pod informer lost its rights:
// the next one reads slices only. It is no ErrInvalid, which would fail
// the watches for good.
var errPodsForbidden = errors.New("k8s: watch pods: forbidden now; reading slices only")
