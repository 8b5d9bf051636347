// Package tcpcount counts this machine's established TCP connections to
// given server ports. It reads /proc/net/tcp and /proc/net/tcp6, so it
// works on Linux only. Tests and "roster bench" use it to see how many
// connections a client holds, whatever the client library.
package tcpcount

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Established counts the client ends of established connections whose
// remote port is one of ports: connections from this machine (any
// process) to servers on those ports.
func Established(ports ...int) (int, error) {
	want := map[string]bool{}
	for _, p := range ports {
		want[fmt.Sprintf("%04X", p)] = true
	}
	total := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		n, err := count(f, want)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func count(path string, ports map[string]bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st …; state 01 is ESTABLISHED.
		fs := strings.Fields(sc.Text())
		if len(fs) > 3 && fs[3] == "01" {
			if _, p, ok := strings.Cut(fs[2], ":"); ok && ports[p] {
				n++
			}
		}
	}
	return n, sc.Err()
}
