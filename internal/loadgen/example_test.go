package loadgen_test

import (
	"context"
	"fmt"
	"time"

	"github.com/roster-go/roster/internal/loadgen"
)

func ExampleRun() {
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: "mem://example", Instances: 20, Services: 4, Processes: 2, Watchers: 1, Workers: 4,
		TTL: 2 * time.Second, Hold: 100 * time.Millisecond, Probes: 4,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Instances, rep.Deregister.Count, rep.Crash.Count)
	// Output: 20 4 1
}
