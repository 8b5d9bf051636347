// Package logbuf is a log destination for tests. It is a buffer safe to
// write from many goroutines, with an slog.Logger writing to it.
package logbuf

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Buffer collects log output; its methods are safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger writing to l at every level, debug
// included.
func (l *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Default makes a new Buffer's Logger slog.Default() until the test
// ends, and returns the Buffer. Tests that call it must not run in
// parallel: the default logger is the process's.
func Default(tb testing.TB) *Buffer {
	l := new(Buffer)
	prev := slog.Default()
	slog.SetDefault(l.Logger())
	tb.Cleanup(func() { slog.SetDefault(prev) })
	return l
}
