package kubernetes

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

func port(name string, n int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Port: &n}
}

// slice is a controller's slice of svc with one endpoint at 10.0.0.1.
func slice(ports ...discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}},
		Ports:      ports,
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
	}
}

// TestPrimaryPort: the primary is the port named by Options.Port, else
// "http", else the Service's first; every other port is an endpoint.
func TestPrimaryPort(t *testing.T) {
	for _, c := range []struct {
		opt   string
		ports []discoveryv1.EndpointPort
		want  string
	}{
		{"", []discoveryv1.EndpointPort{port("metrics", 9090), port("http", 8080)}, "10.0.0.1:8080"},
		{"", []discoveryv1.EndpointPort{port("grpc", 9000), port("metrics", 9090)}, "10.0.0.1:9000"},
		{"metrics", []discoveryv1.EndpointPort{port("http", 8080), port("metrics", 9090)}, "10.0.0.1:9090"},
		{"grpc", []discoveryv1.EndpointPort{port("metrics", 9090), port("http", 8080)}, "10.0.0.1:8080"},
	} {
		ins := platform{port: c.opt}.instances("svc", slice(c.ports...))
		if len(ins) != 1 || ins[0].Address != c.want || len(ins[0].Endpoints) != 2 || ins[0].Endpoints[0].Address != c.want {
			t.Errorf("port=%q, ports %v: %+v; want primary %s first of 2 endpoints", c.opt, names(c.ports), ins, c.want)
		}
	}
}

func names(ports []discoveryv1.EndpointPort) []string {
	var out []string
	for _, p := range ports {
		out = append(out, *p.Name)
	}
	return out
}

// TestPlatformPortsWithinLimits: whatever another controller writes, an
// instance stays within the limits (the registry would skip it): ports
// past MaxEndpoints and names no endpoint may carry are dropped, the
// primary kept; an appProtocol Roster cannot carry is left out.
func TestPlatformPortsWithinLimits(t *testing.T) {
	var ports []discoveryv1.EndpointPort
	for i := range 10 {
		ports = append(ports, port(fmt.Sprintf("p%d", i), int32(1000+i)))
	}
	ports = append(ports, port("Bad_Name", 1), port("p1", 2), port("http", 8080))
	h2c, grpc, udp := "kubernetes.io/h2c", "GRPC", corev1.ProtocolUDP
	ports[0].AppProtocol, ports[1].AppProtocol, ports[2].Protocol = &grpc, &h2c, &udp
	ins := platform{}.instances("svc", slice(ports...))
	if len(ins) != 1 {
		t.Fatalf("%d instances, want 1", len(ins))
	}
	in := ins[0]
	if err := backend.ValidateFields(in); err != nil {
		t.Fatalf("%+v: %v", in, err)
	}
	want := []driver.Endpoint{{Name: "http", Address: "10.0.0.1:8080"}, {Name: "p0", Address: "10.0.0.1:1000", Protocol: "grpc"},
		{Name: "p1", Address: "10.0.0.1:1001"}, {Name: "p2", Address: "10.0.0.1:1002", Protocol: "udp"}}
	if in.Address != "10.0.0.1:8080" || len(in.Endpoints) != backend.MaxEndpoints || fmt.Sprint(in.Endpoints[:4]) != fmt.Sprint(want) {
		t.Errorf("%+v; want primary http and %d endpoints starting %v", in, backend.MaxEndpoints, want)
	}
}

// TestPlatformOnePort: a slice of one port, named or not, is a one-port
// instance as before: no endpoints, so it serves every name.
func TestPlatformOnePort(t *testing.T) {
	var n int32 = 8080
	for _, p := range []discoveryv1.EndpointPort{{Port: &n}, port("web", 8080)} {
		ins := platform{}.instances("svc", slice(p))
		if len(ins) != 1 || ins[0].Address != "10.0.0.1:8080" || ins[0].Endpoints != nil {
			t.Errorf("%+v; want 10.0.0.1:8080 and no endpoints", ins)
		}
	}
}

// TestPlatformPodOf: a Pod is read only when the endpoint names it with
// its UID (a StatefulSet's Pod recreated under the same name is another).
func TestPlatformPodOf(t *testing.T) {
	s := slice(port("http", 8080))
	s.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-0", UID: "uid-2"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", UID: "uid-1", Labels: map[string]string{"version": "v1"}}}
	p := platform{pod: func(string) *corev1.Pod { return pod }}
	if ins := p.instances("svc", s); len(ins) != 1 || ins[0].Version != "" {
		t.Errorf("another Pod's labels read: %+v", ins)
	}
	pod.UID = "uid-2"
	if ins := p.instances("svc", s); len(ins) != 1 || ins[0].Version != "v1" || ins[0].ID != "web-0" {
		t.Errorf("%+v; want web-0 at v1", ins)
	}
}

// TestPlatformRegion: the slice's roster.dev/region annotation is its
// endpoints' region; a Pod's wins.
func TestPlatformRegion(t *testing.T) {
	s := slice(port("http", 8080))
	s.Annotations = map[string]string{AnnotationRegion: "eu-west"}
	if ins := (platform{}).instances("svc", s); len(ins) != 1 || ins[0].Region != "eu-west" {
		t.Errorf("%+v; want region eu-west from the slice", ins)
	}
	s.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Annotations: map[string]string{AnnotationRegion: "us-east"}}}
	p := platform{pod: func(string) *corev1.Pod { return pod }}
	if ins := p.instances("svc", s); len(ins) != 1 || ins[0].Region != "us-east" {
		t.Errorf("%+v; want the Pod's region us-east", ins)
	}
}
