package testserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A process that exits on SIGTERM ends within its grace; one that ignores
// it is killed when the grace runs out.
func TestStopGrace(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	for _, tc := range []struct {
		script string
		grace  time.Duration
		min    time.Duration
	}{
		{"exec sleep 60", time.Minute, 0},
		{"trap '' TERM; echo ready; sleep 60", 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		var p Process
		if err := p.Start(exec.Command("sh", "-c", tc.script), log); err != nil {
			t.Fatal(err)
		}
		if tc.min > 0 { // the trap must be set before SIGTERM is sent
			for !strings.Contains(LogTail(log, -1), "ready") {
				time.Sleep(5 * time.Millisecond)
			}
		}
		start := time.Now()
		p.Stop(tc.grace)
		if d := time.Since(start); d < tc.min || d >= time.Minute {
			t.Errorf("%q: Stop(%v) took %v", tc.script, tc.grace, d)
		}
		if p.Running() {
			t.Errorf("%q: still running after Stop", tc.script)
		}
		p.Stop(tc.grace) // safe twice
	}
}

func TestDir(t *testing.T) {
	mine, err := NewDir("", "testserver-dir-")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(mine.Path); err != nil || !fi.IsDir() {
		t.Fatalf("NewDir made no directory: %v", err)
	}
	if err := mine.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine.Path); !os.IsNotExist(err) {
		t.Errorf("Remove left the temporary directory: %v", err)
	}

	given := t.TempDir()
	d, err := NewDir(given, "unused-")
	if err != nil || d.Path != given {
		t.Fatalf("NewDir(%q) = %q, %v", given, d.Path, err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(given); err != nil {
		t.Errorf("Remove deleted the caller's directory: %v", err)
	}
}

func TestBinaryFind(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no ~/.cache/roster build
	b := Binary{Pkg: "xtest", Name: "X", Version: "1.0", Env: "ROSTER_TEST_X_BIN", Cached: "x-1.0"}

	file := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(file, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(b.Env, file)
	if p, err := b.Find(); err != nil || p != file {
		t.Errorf("with %s set: %q, %v", b.Env, p, err)
	}
	t.Setenv(b.Env, file+".missing")
	if _, err := b.Find(); err == nil || !strings.Contains(err.Error(), b.Env) {
		t.Errorf("with %s naming no file: %v, want an error naming it", b.Env, err)
	}

	t.Setenv(b.Env, "")
	if _, err := b.Find(); err == nil || !strings.Contains(err.Error(), "~/.cache/roster/x-1.0") {
		t.Errorf("nothing to find: %v, want an error naming the cache path", err)
	}
	cached := filepath.Join(os.Getenv("HOME"), ".cache", "roster", "x-1.0")
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Find(); err != nil || p != cached {
		t.Errorf("cached build: %q, %v", p, err)
	}

	b.Cached, b.PATH = "none", "sh"
	if p, err := b.Find(); err != nil || filepath.Base(p) != "sh" {
		t.Errorf("on PATH: %q, %v", p, err)
	}
}
