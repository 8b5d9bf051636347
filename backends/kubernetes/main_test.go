package kubernetes_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/klog/v2"

	"github.com/roster-go/roster/internal/servers/kubetest"
)

// server is the package's shared apiserver: one start (~3s, 260MB) for
// every test; fault tests that restart it run one at a time.
var server *kubetest.Server

func TestMain(m *testing.M) {
	ignore := goleak.IgnoreCurrent()
	// client-go's reflectors log every watch they lose; the faults here
	// lose many on purpose.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	s, err := kubetest.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
