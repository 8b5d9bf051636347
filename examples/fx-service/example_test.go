package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
)

// The whole program runs as its own test: two greeters register, a client
// calls them, greeter-1 leaves while the client calls, and no call fails.
func Example() {
	os.Unsetenv(rosterfx.EnvURL) // its own embedded etcd
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	if err := run(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("no request failed")
	// Output: no request failed
}

// A start that fails is logged at error level, naming the cause: the
// example's fx apps do not exit 1 in silence.
func TestStartErrorIsLogged(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	app := greeter("nope://registry", "greeter-x")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err == nil {
		app.Stop(ctx)
		t.Fatal("started on a registry URL of no backend")
	}
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, `no backend for scheme \"nope\"`) {
		t.Fatalf("the failed start logged %q; want an error naming the scheme", out)
	}
}
