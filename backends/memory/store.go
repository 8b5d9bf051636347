package memory

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/roster-go/roster/registry/driver"
)

var _ driver.Store = (*Driver)(nil)

// GetRecord implements driver.Store.
func (d *Driver) GetRecord(_ context.Context, key string) (driver.Record, error) {
	s, err := d.begin()
	if err != nil {
		return driver.Record{}, err
	}
	defer s.mu.Unlock()
	rec, ok := s.records[key]
	if !ok {
		return driver.Record{}, fmt.Errorf("memory: record %s: %w", key, driver.ErrNotFound)
	}
	return clone(rec), nil
}

// ListRecords implements driver.Store.
func (d *Driver) ListRecords(_ context.Context, prefix string) ([]driver.Record, error) {
	s, err := d.begin()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.listRecords(prefix), nil
}

// PutRecord implements driver.Store.
func (d *Driver) PutRecord(_ context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	s, err := d.begin()
	if err != nil {
		return driver.Record{}, err
	}
	defer s.mu.Unlock()
	if err := s.precondition(key, ifVersion); err != nil {
		return driver.Record{}, err
	}
	s.recSeq++
	rec := driver.Record{Key: key, Value: append([]byte(nil), value...), Version: strconv.FormatUint(s.recSeq, 10)}
	if s.records == nil {
		s.records = map[string]driver.Record{}
	}
	s.records[key] = rec
	s.bump()
	return clone(rec), nil
}

// DeleteRecord implements driver.Store.
func (d *Driver) DeleteRecord(_ context.Context, key, ifVersion string) error {
	s, err := d.begin()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.precondition(key, ifVersion); err != nil {
		return err
	}
	if _, ok := s.records[key]; ok {
		delete(s.records, key)
		s.bump()
	}
	return nil
}

// precondition checks a write's ifVersion; s.mu held.
func (s *Server) precondition(key, ifVersion string) error {
	rec, ok := s.records[key]
	switch {
	case ifVersion == "":
		return nil
	case ifVersion == driver.VersionAbsent && !ok:
		return nil
	case ok && rec.Version == ifVersion:
		return nil
	}
	return fmt.Errorf("memory: record %s: %w", key, driver.ErrConflict)
}

// listRecords returns the records under prefix; s.mu held.
func (s *Server) listRecords(prefix string) []driver.Record {
	out := []driver.Record{}
	for k, rec := range s.records {
		if strings.HasPrefix(k, prefix) {
			out = append(out, clone(rec))
		}
	}
	return out
}

func clone(rec driver.Record) driver.Record {
	rec.Value = append([]byte(nil), rec.Value...)
	return rec
}

// WatchRecords implements driver.Store.
func (d *Driver) WatchRecords(_ context.Context, prefix string) (driver.RecordStream, error) {
	s, err := d.begin()
	if err != nil {
		return nil, err
	}
	s.mu.Unlock()
	return &recordStream{st: stream{d: d, closed: make(chan struct{})}, prefix: prefix}, nil
}

// recordStream waits as a service stream does, on any change of the
// server or the link.
type recordStream struct {
	st     stream
	prefix string
}

func (rs *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	var out []driver.Record
	err := rs.st.wait(ctx, func(s *Server) { out = s.listRecords(rs.prefix) })
	return out, err
}

func (rs *recordStream) Close() error { return rs.st.Close() }
