package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/roster-go/roster/registry"
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

// endpointsNote is " (http=…,grpc=…)" for an instance with named
// endpoints, for the sidecar's log lines; "" for one with one port.
func endpointsNote(in registry.Instance) string {
	if len(in.Endpoints) == 0 {
		return ""
	}
	return " (" + endpointString(in.Endpoints) + ")"
}

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
