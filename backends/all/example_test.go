package all_test

import (
	"fmt"

	_ "github.com/roster-go/roster/backends/all"
	"github.com/roster-go/roster/registry"
)

// Importing the package registers every scheme.
func Example() {
	fmt.Println(registry.Schemes())
	// Output: [consul consuls dns+srv dual etcd etcds k8s mem nats nats+tls redis redis+cluster redis+sentinel rediss rediss+cluster rediss+sentinel zk]
}
