//go:build !linux

package agent_test

import "time"

// othersCPU is known on Linux only.
func othersCPU() (time.Duration, bool) { return 0, false }
