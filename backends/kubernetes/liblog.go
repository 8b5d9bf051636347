package kubernetes

import (
	"log/slog"

	"k8s.io/klog/v2"

	"github.com/roster-go/roster/internal/liblog"
)

// client-go logs through klog, to stderr by default ("Failed to watch…",
// "Unhandled Error" from its reflectors while the apiserver is away):
// those lines go to slog.Default() at debug level instead (see
// internal/liblog), so that a failed call prints the driver's one error,
// not library lines beside it. klog has one process-wide logger; a
// program that sets its own with klog.SetLogger after this package's init
// keeps it.
func init() { klog.SetSlogLogger(slog.New(liblog.Handler("client-go"))) }
