package kubetest_test

import (
	"context"
	"fmt"
	"time"

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
