package kubernetes_test

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kube "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/registry/driver"
)

// ErrorKind classifies client-go's real errors: a missing object is
// ErrNotFound; a request the apiserver refuses (validation, RBAC, a
// rejected token) is ErrInvalid, which no retry can change; an apiserver
// that does not answer is ErrUnavailable.
func TestErrorKind(t *testing.T) {
	config := func(a kubetest.Access) *rest.Config {
		kc, err := server.KubeconfigFor(a)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 2 * time.Second
		return cfg
	}
	client := func(a kubetest.Access) kube.Interface {
		cs, err := kube.NewForConfig(config(a))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	d, err := kubernetes.New(kubernetes.Options{Config: config(kubetest.Access{})})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	get := func(cs kube.Interface) func() error {
		return func() error {
			_, err := cs.CoordinationV1().Leases("default").Get(ctx, "roster-none", metav1.GetOptions{})
			return err
		}
	}
	admin := client(kubetest.Access{})
	for _, row := range []struct {
		name string
		call func() error
		want error
	}{
		{"get a missing Lease", get(admin), driver.ErrNotFound},
		{"a Lease with an invalid name", func() error {
			_, err := admin.CoordinationV1().Leases("default").Create(ctx,
				&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "Not_A_Name"}}, metav1.CreateOptions{})
			return err
		}, driver.ErrInvalid},
		{"a user without the role", get(client(kubetest.Access{Token: kubetest.LimitedToken})), driver.ErrInvalid},
		{"a rejected token", get(client(kubetest.Access{Token: "no-such-token"})), driver.ErrInvalid},
		{"no apiserver", get(client(kubetest.Access{Addr: "127.0.0.1:1"})), driver.ErrUnavailable},
	} {
		err := row.call()
		if err == nil {
			t.Errorf("%s: no error", row.name)
			continue
		}
		if got := d.ErrorKind(err); got != row.want {
			t.Errorf("%s: ErrorKind(%v) = %v, want %v", row.name, err, got, row.want)
		}
	}
}
