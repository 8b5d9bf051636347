package kubernetes_test

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kube "k8s.io/client-go/kubernetes"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/registry"
)

// TestPlatformSlices: slices written by another controller (as the
// endpointslice controller does for Pods) are read with their conditions,
// zones and the weight and version annotations.
func TestPlatformSlices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := testClientset(t)
	r := openRegistry(t)
	w, err := r.Watch(ctx, "pods-web")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	yes, no, zone := true, false, "eu-1a"
	createSlice(t, cs, platformSlice("pods-web", discoveryv1.AddressTypeIPv4,
		map[string]string{kubernetes.AnnotationWeight: "40", kubernetes.AnnotationVersion: "2.1.0"},
		discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, Zone: &zone, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}},
		discoveryv1.Endpoint{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}},
		discoveryv1.Endpoint{Addresses: []string{"10.1.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: &no, Serving: &no}},
	))
	want := []registry.Instance{
		{ID: "10.1.0.2", Service: "pods-web", Address: "10.1.0.2:8080", Version: "2.1.0", Weight: 0},
		{ID: "web-1", Service: "pods-web", Address: "10.1.0.1:8080", Version: "2.1.0", Zone: "eu-1a", Weight: 40},
	}
	for {
		sn, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch never showed %v: %v", want, err)
		}
		if len(sn.Instances) == len(want) {
			for i := range want {
				if !sn.Instances[i].Equal(want[i]) {
					t.Errorf("instance %d = %+v, want %+v", i, sn.Instances[i], want[i])
				}
			}
			break
		}
	}
	got, err := r.Lookup(ctx, "pods-web")
	if err != nil || len(got.Instances) != 2 {
		t.Fatalf("Lookup = %v, %v; want the 2 serving endpoints", got.Instances, err)
	}
}

// TestPlatformWeightClamped: a weight annotation past MaxWeight on a
// platform slice serves its endpoints at MaxWeight, rather than making
// every one of them a record past the limits (skipped).
func TestPlatformWeightClamped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := testClientset(t)
	createSlice(t, cs, platformSlice("pods-heavy", discoveryv1.AddressTypeIPv4,
		map[string]string{kubernetes.AnnotationWeight: "100000"},
		discoveryv1.Endpoint{Addresses: []string{"10.2.0.1"}}))
	got, err := openRegistry(t).Lookup(ctx, "pods-heavy")
	if err != nil || len(got.Instances) != 1 || got.Instances[0].Weight != backend.MaxWeight {
		t.Fatalf("Lookup = %+v, %v; want 10.2.0.1 at weight %d", got.Instances, err, backend.MaxWeight)
	}
}

// TestPlatformSlicesIPv6: endpoints of an IPv6 slice without a Pod to
// name them are served, under their address made an ID (a raw IPv6
// address is no ID: the registry skipped every such endpoint).
func TestPlatformSlicesIPv6(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := testClientset(t)
	createSlice(t, cs, platformSlice("pods-six", discoveryv1.AddressTypeIPv6, nil,
		discoveryv1.Endpoint{Addresses: []string{"fd00::1"}}))
	got, err := openRegistry(t).Lookup(ctx, "pods-six")
	want := registry.Instance{ID: "fd00--1", Service: "pods-six", Address: "[fd00::1]:8080", Weight: registry.DefaultWeight}
	if err != nil || len(got.Instances) != 1 || !got.Instances[0].Equal(want) {
		t.Fatalf("Lookup = %+v, %v; want %+v", got.Instances, err, want)
	}
}

// platformSlice is a slice of service as another controller writes it
// (named <service>-abc, port 8080).
func platformSlice(service string, at discoveryv1.AddressType, annotations map[string]string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	port := int32(8080)
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service + "-abc", Annotations: annotations, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "test-controller"}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
		Endpoints:   eps,
	}
}

// createSlice writes slice as another controller would, deleted when the
// test ends.
func createSlice(t *testing.T, cs kube.Interface, slice *discoveryv1.EndpointSlice) {
	t.Helper()
	slices := cs.DiscoveryV1().EndpointSlices("default")
	if _, err := slices.Create(t.Context(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slices.Delete(context.Background(), slice.Name, metav1.DeleteOptions{}) })
}

// testClientset is a client of the package's apiserver as the test user.
func testClientset(t *testing.T) kube.Interface {
	t.Helper()
	cs, err := server.Clientset(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
