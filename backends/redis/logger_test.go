package redis_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry"
)

// go-redis's own lines about a failed dial go to slog at debug level, not
// to stderr: the caller gets one error. Not parallel: it swaps the
// default logger.
func TestLibraryLogGoesToSlogDebug(t *testing.T) {
	var log logbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(log.Logger())
	defer slog.SetDefault(prev)
	r, err := registry.Open(t.Context(), "redis://127.0.0.1:1?dial_timeout=100ms")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Lookup(t.Context(), "s"); err == nil {
		t.Fatal("Lookup on a closed port succeeded")
	}
	got := log.String()
	if !strings.Contains(got, "level=DEBUG") || !strings.Contains(got, "go-redis:") || !strings.Contains(got, "dial") {
		t.Fatalf("go-redis's dial failure not logged at debug through slog; slog got %q", got)
	}
}
