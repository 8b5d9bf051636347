package middleware

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/internal/readfile"
	"github.com/roster-go/roster/registry"
)

// snapshotFile is the on-disk form of a persisted snapshot.
type snapshotFile struct {
	Format   int               `json:"format"`
	Snapshot registry.Snapshot `json:"snapshot"`
}

const snapshotFormat = 1

// saveSnapshot writes s to dir/<service>.json atomically (temp file and
// rename), so a crash never leaves a torn file. Service names are
// validated to [a-z0-9._-], so they are safe file names.
func saveSnapshot(dir string, s registry.Snapshot) error {
	if err := backend.ValidateService(s.Service); err != nil {
		return err
	}
	b, err := json.Marshal(snapshotFile{Format: snapshotFormat, Snapshot: s})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+s.Service+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, s.Service+".json")); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// confirmSnapshot records that the persisted snapshot of service was
// still the backend's state at now, by setting the file's modification
// time: a state unchanged for hours but confirmed a minute ago is a minute
// old, not hours.
func confirmSnapshot(dir, service string, now time.Time) error {
	return os.Chtimes(filepath.Join(dir, service+".json"), now, now)
}

// loadSnapshot reads the persisted snapshot of service; ok is false when
// there is none. Its At is the last time it was confirmed: the later of
// when it was read from the backend and the file's modification time.
func loadSnapshot(dir, service string) (s registry.Snapshot, ok bool, err error) {
	if err := backend.ValidateService(service); err != nil {
		return s, false, err
	}
	path := filepath.Join(dir, service+".json")
	b, err := readfile.AtMost(path, maxSnapshotFile)
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return s, false, err
	}
	var f snapshotFile
	if err := json.Unmarshal(b, &f); err != nil {
		return s, false, fmt.Errorf("snapshot file of %s: %w", service, err)
	}
	if f.Format != snapshotFormat || f.Snapshot.Service != service {
		return s, false, fmt.Errorf("snapshot file of %s: unexpected format %d / service %q", service, f.Format, f.Snapshot.Service)
	}
	if err := registry.CheckSnapshot(f.Snapshot); err != nil {
		return s, false, fmt.Errorf("snapshot file of %s: %w", service, err)
	}
	f.Snapshot.Stale = true
	if mt := fi.ModTime(); mt.After(f.Snapshot.At) && !mt.After(time.Now()) {
		f.Snapshot.At = mt
	}
	return f.Snapshot, true, nil
}

// maxSnapshotFile bounds a snapshot file read: 10,000 instances at the
// largest encoded size each would be 160 MiB, real ones are far smaller.
// The file is this package's; an instance that fails
// registry.CheckSnapshot means it was altered or damaged, and none of it
// is served.
const maxSnapshotFile = 256 << 20
