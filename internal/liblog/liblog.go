// Package liblog takes the log lines of the backends' client libraries
// off stderr. Those are go-redis, go-zookeeper, etcd's zap logger, grpc
// and client-go's klog. By default they print several lines per failed
// call, while the driver's error already says what failed, once.
//
// Each line goes to slog.Default() at debug level, whatever its level in
// the library. Its message starts with the library's name. slog.Default()
// is read on every line, so a program that sets its default logger after
// the backends' init is followed.
package liblog

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
)

// enabled reports whether slog.Default() takes debug lines.
func enabled(ctx context.Context) bool {
	return slog.Default().Enabled(ctx, slog.LevelDebug)
}

// Printf logs a library's printf-style line at debug level.
func Printf(ctx context.Context, lib, format string, args ...any) {
	if !enabled(ctx) {
		return
	}
	slog.Default().DebugContext(ctx, lib+": "+strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Writer is an io.Writer whose every write is one debug line of lib (for
// loggers that write formatted lines, such as grpclog's).
type Writer string

// Write implements io.Writer.
func (lib Writer) Write(p []byte) (int, error) {
	Printf(context.Background(), string(lib), "%s", p)
	return len(p), nil
}

// Handler returns an slog.Handler passing every record to slog.Default()
// at debug level, its message prefixed with lib and its own level kept as
// the attribute lib_level (for libraries that log through slog or logr).
func Handler(lib string) slog.Handler { return &handler{lib: lib} }

type handler struct {
	lib string
	// wrap applies the attributes and groups added with WithAttrs and
	// WithGroup to the default handler of the moment.
	wrap []func(slog.Handler) slog.Handler
}

func (h *handler) Enabled(ctx context.Context, _ slog.Level) bool { return enabled(ctx) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, slog.LevelDebug, h.lib+": "+r.Message, r.PC)
	out.AddAttrs(slog.String("lib_level", r.Level.String()))
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	base := slog.Default().Handler()
	for _, w := range h.wrap {
		base = w(base)
	}
	return base.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.with(func(b slog.Handler) slog.Handler { return b.WithAttrs(attrs) })
}

func (h *handler) WithGroup(name string) slog.Handler {
	return h.with(func(b slog.Handler) slog.Handler { return b.WithGroup(name) })
}

func (h *handler) with(w func(slog.Handler) slog.Handler) slog.Handler {
	return &handler{lib: h.lib, wrap: append(h.wrap[:len(h.wrap):len(h.wrap)], w)}
}

// CaptureProcessLoggers routes the process-wide loggers of grpc (grpclog:
// the etcd client's transport) and client-go (klog: its reflectors'
// "Failed to watch") to slog.Default() at debug level, unless the
// environment asks for grpc's or the etcd client's own logging
// (GRPC_GO_LOG_SEVERITY_LEVEL, GRPC_GO_LOG_VERBOSITY_LEVEL,
// ETCD_CLIENT_DEBUG). Those loggers belong to the whole program, so the
// backends do not touch them: a command whose stderr must carry its own
// errors only (roster) calls this at start.
func CaptureProcessLoggers() {
	klog.SetSlogLogger(slog.New(Handler("client-go")))
	for _, env := range []string{"GRPC_GO_LOG_SEVERITY_LEVEL", "GRPC_GO_LOG_VERBOSITY_LEVEL", "ETCD_CLIENT_DEBUG"} {
		if os.Getenv(env) != "" {
			return
		}
	}
	w := Writer("grpc")
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(w, w, w))
}
