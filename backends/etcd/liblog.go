package etcd

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roster-go/roster/internal/liblog"
)

// The etcd client logs through zap (its retries, its balancer): its lines
// go to slog.Default() at debug level instead (see internal/liblog), so
// that a failed call prints the driver's one error, not library lines
// beside it. grpc logs through grpclog, one logger for the whole process
// (the program's own gRPC servers and clients too), which this package
// leaves alone; the roster command routes it (liblog.CaptureProcessLoggers).

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
