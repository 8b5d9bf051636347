package etcd

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/grpclog"

	"github.com/roster-go/roster/internal/liblog"
)

// The etcd client logs through zap (its retries, its balancer) and grpc
// through grpclog (to stderr from ERROR up by default): both go to
// slog.Default() at debug level instead (see internal/liblog), so that a
// failed call prints the driver's one error, not library lines beside
// it. grpclog has one process-wide logger: it is set here unless the
// environment asks for grpc's or the etcd client's own logging
// (GRPC_GO_LOG_SEVERITY_LEVEL, GRPC_GO_LOG_VERBOSITY_LEVEL,
// ETCD_CLIENT_DEBUG); a program that sets its own with grpclog.SetLoggerV2
// after this package's init keeps it.
func init() {
	for _, env := range []string{"GRPC_GO_LOG_SEVERITY_LEVEL", "GRPC_GO_LOG_VERBOSITY_LEVEL", "ETCD_CLIENT_DEBUG"} {
		if os.Getenv(env) != "" {
			return
		}
	}
	w := liblog.Writer("grpc")
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(w, w, w))
}

// libLogger is the zap logger of every client the driver makes.
func libLogger() *zap.Logger { return zap.New(slogCore{}) }

// slogCore is a zapcore.Core writing to liblog.Handler("etcd-client").
type slogCore struct{ fields []zapcore.Field }

func (slogCore) Enabled(zapcore.Level) bool {
	return slog.Default().Enabled(context.Background(), slog.LevelDebug)
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{fields: slices.Concat(c.fields, fields)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range slices.Concat(c.fields, fields) {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	level := slog.LevelDebug + slog.Level(4*(e.Level+1)) // zap's debug -1 … fatal 5; slog's steps are 4
	slog.New(liblog.Handler("etcd-client")).LogAttrs(context.Background(), level, e.Message, attrs...)
	return nil
}

func (slogCore) Sync() error { return nil }
