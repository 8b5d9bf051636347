//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A rendered file keeps the mode it had: a config made 0640 for
// nginx's group stays out of other users' reach. A new one is 0644.
func TestAgentTemplateKeepsTheFilesMode(t *testing.T) {
	_, url := openReg(t, "/agent-template-mode/")
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "in.tmpl")
	if err := os.WriteFile(tmpl, []byte("static\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kept, made := filepath.Join(dir, "kept.conf"), filepath.Join(dir, "made.conf")
	if err := os.WriteFile(kept, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kept, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	startAgent(t, "--registry", url, "--template", tmpl+":"+kept, "--template", tmpl+":"+made)
	for path, want := range map[string]os.FileMode{kept: 0o640, made: 0o644} {
		waitFile(t, path, "static\n", 30*time.Second)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o after the render, want %04o", filepath.Base(path), got, want)
		}
	}
}
