package kubetest_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roster-go/roster/internal/servers/kubetest"
)

// Start a kube-apiserver over an embedded etcd, then talk to it with
// client-go as the test user.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := kubetest.Start(ctx)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	cs, err := s.Clientset(s.Addr())
	if err != nil {
		panic(err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(ns.Name, ns.Status.Phase)
	// Output: default Active
}

// Run the real EndpointSlice controller: it writes the slice of a
// Service, as in a cluster (no Pods yet, so no endpoints).
func ExampleServer_StartControllers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := kubetest.Start(ctx)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if err := s.StartControllers(ctx, "endpointslice"); err != nil {
		panic(err)
	}
	cs, err := s.Clientset(s.Addr())
	if err != nil {
		panic(err)
	}
	w, err := cs.DiscoveryV1().EndpointSlices("default").Watch(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		panic(err)
	}
	ev := <-w.ResultChan()
	slice := ev.Object.(*discoveryv1.EndpointSlice)
	fmt.Println(ev.Type, slice.Labels["endpointslice.kubernetes.io/managed-by"], len(slice.Endpoints))
	// Output: ADDED endpointslice-controller.k8s.io 0
}
