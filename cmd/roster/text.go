package main

import (
	"fmt"
	"os"
	"syscall"
)

// plural returns "1 instance", "2 instances", "0 instances"; nouns whose
// plural is not noun+"s" are listed in irregular.
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	if p, ok := irregular[noun]; ok {
		return fmt.Sprintf("%d %s", n, p)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

var irregular = map[string]string{"retry": "retries"}

// signalName names a signal as people know it ("SIGTERM"), where
// os.Signal.String gives its description ("terminated").
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}
