package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/liblog"
)

// libLogger takes go-redis's own log lines ("pool.go:770: failed to dial
// after 5 attempts…", "Unexpected conn state changed…") off stderr, where
// the library prints them by default, several times per failed call: the
// driver's errors already say what failed, once, so the library's lines
// go to slog.Default() at debug level (see internal/liblog).
// go-redis has one process-wide logger; a program that sets its own with
// goredis.SetLogger after this package's init keeps it.
type libLogger struct{}

func (libLogger) Printf(ctx context.Context, format string, v ...any) {
	liblog.Printf(ctx, "go-redis", format, v...)
}

func init() { goredis.SetLogger(libLogger{}) }
