package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/testserver"
)

// envControllerBin names the variable that points at kube-controller-manager.
const envControllerBin = "ROSTER_KUBE_CONTROLLER_MANAGER"

// findControllerBinary returns the path of kube-controller-manager:
// $ROSTER_KUBE_CONTROLLER_MANAGER, then
// ~/.cache/roster/kube-controller-manager-v1.34.2.
func findControllerBinary() (string, error) {
	return testserver.Binary{Pkg: "kubetest", Name: "kube-controller-manager", Version: version,
		Env: envControllerBin, Cached: "kube-controller-manager-" + version}.Find()
}

// StartControllers runs kube-controller-manager v1.34.2 against the
// Server with only the named controllers (such as "endpointslice"), as
// the administrator and without leader election. It waits for its
// /healthz. Close stops it; a Server runs at most one.
//
// No kubelet runs: a test creates Pods and sets their status itself.
func (s *Server) StartControllers(ctx context.Context, controllers ...string) error {
	if len(controllers) == 0 {
		return errors.New("kubetest: StartControllers: no controller named")
	}
	bin, err := findControllerBinary()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kubetest: server closed")
	}
	if s.kcm.Running() {
		return errors.New("kubetest: StartControllers: a controller manager runs already")
	}
	kc, err := s.KubeconfigFor(Access{Namespace: "default"})
	if err != nil {
		return err
	}
	port, err := loopback.FreePort()
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	args := []string{
		"--kubeconfig=" + kc,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		// Its own serving port, for /healthz only (anonymous: no
		// authentication kubeconfig; /healthz is always allowed).
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(s.dir, "kcm-certs"),
	}
	logFile := filepath.Join(s.dir, "controller-manager.log")
	if err := s.kcm.Start(exec.Command(bin, args...), logFile); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := s.waitControllers(ctx, port); err != nil {
		s.kcm.Stop(10 * time.Second)
		return fmt.Errorf("%w (log: %s)", err, logFile)
	}
	return nil
}

// waitControllers polls the controller manager's /healthz.
func (s *Server) waitControllers(ctx context.Context, port int) error {
	return pollOK(ctx, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", "", s.kcm.Done(), "kube-controller-manager")
}
