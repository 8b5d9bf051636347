package liblog_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/liblog"
	"github.com/roster-go/roster/internal/logbuf"
)

// useLog makes a buffer slog.Default() for the test, at level.
func useLog(t *testing.T, level slog.Level) *logbuf.Buffer {
	var log logbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: level})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &log
}

func TestLinesGoToDebug(t *testing.T) {
	log := useLog(t, slog.LevelDebug)
	liblog.Printf(context.Background(), "go-redis", "pool.go:770: failed to dial %s\n", "127.0.0.1:1")
	liblog.Writer("grpc").Write([]byte("WARNING: [core] addrConn failed\n"))
	l := slog.New(liblog.Handler("client-go")).With("a", 1).WithGroup("g")
	l.Error("reflector failed", "b", 2)
	want := []string{
		`level=DEBUG msg="go-redis: pool.go:770: failed to dial 127.0.0.1:1"`,
		`level=DEBUG msg="grpc: WARNING: [core] addrConn failed"`,
		`level=DEBUG msg="client-go: reflector failed" a=1 g.lib_level=ERROR g.b=2`,
	}
	got := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), log.String())
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("line %d = %s, want %s", i, got[i], want[i])
		}
	}
}

// At the default level (info) nothing is written: a library's error is
// not the program's.
func TestQuietAtInfo(t *testing.T) {
	log := useLog(t, slog.LevelInfo)
	liblog.Printf(context.Background(), "go-redis", "failed to dial")
	liblog.Writer("grpc").Write([]byte("ERROR: x\n"))
	slog.New(liblog.Handler("client-go")).Error("reflector failed")
	if log.String() != "" {
		t.Errorf("logged at info level: %s", log.String())
	}
}
