package logbuf_test

import (
	"fmt"
	"strings"

	"github.com/roster-go/roster/internal/logbuf"
)

func Example() {
	var log logbuf.Buffer
	log.Logger().Debug("dial failed", "addr", "127.0.0.1:1")
	fmt.Println(strings.Contains(log.String(), "level=DEBUG msg=\"dial failed\""))
	// Output: true
}
