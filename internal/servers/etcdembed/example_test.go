package etcdembed_test

import (
	"fmt"

	"github.com/roster-go/roster/internal/servers/etcdembed"
)

// ExampleRegistryURL shows the URL form both etcdlocal and etcdtest hand
// out.
func ExampleRegistryURL() {
	fmt.Println(etcdembed.RegistryURL([]string{"127.0.0.1:2379"}, false, "", "", nil))
	fmt.Println(etcdembed.RegistryURL([]string{"127.0.0.1:40001", "127.0.0.1:40003"}, true, "/tmp/ca.pem", "/roster", []string{"progress_interval=1s"}))
	// Output:
	// etcd://127.0.0.1:2379
	// etcds://127.0.0.1:40001,127.0.0.1:40003?prefix=%2Froster&ca_file=%2Ftmp%2Fca.pem&progress_interval=1s
}
