package liblog_test

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/roster-go/roster/internal/liblog"
	"github.com/roster-go/roster/internal/logbuf"
)

// A library's error line reaches slog.Default() at debug level, named.
func Example() {
	var log logbuf.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(log.Logger())
	slog.New(liblog.Handler("client-go")).Error("Failed to watch", "resource", "leases")
	fmt.Println(strings.Contains(log.String(), `level=DEBUG msg="client-go: Failed to watch" lib_level=ERROR resource=leases`))
	// Output: true
}
