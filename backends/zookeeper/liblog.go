package zookeeper

import (
	"context"

	"github.com/roster-go/roster/internal/liblog"
)

// libLogger takes go-zookeeper's own log lines ("failed to connect to
// 127.0.0.1:2181…", "authentication failed…") off stderr, where its
// default logger prints them on every reconnect attempt: every state
// change reaches the driver as an event and every failure the caller as
// an error, so the library's lines go to slog.Default() at debug level
// (see internal/liblog). Each client gets it with zk.WithLogger.
type libLogger struct{}

func (libLogger) Printf(format string, args ...any) {
	liblog.Printf(context.Background(), "go-zookeeper", format, args...)
}
