package agent_test

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// othersCPU returns the CPU time the machine spent so far outside this
// process: every CPU's busy time in /proc/stat (steal included: another
// guest had the core), less this process's own. Benchmarks report its
// increase next to their latencies: the load they ran under.
func othersCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line) // cpu user nice system idle iowait irq softirq steal guest guest_nice
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, false
	}
	var jiffies int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal (guest is within user)
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return 0, false
		}
		jiffies += n
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	const userHZ = 100 // the unit of /proc/stat on Linux
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return time.Duration(jiffies)*time.Second/userHZ - self, true
}
