package backend

import (
	"context"

	"github.com/roster-go/roster/registry/driver"
)

// GuardStore returns the record store of a driver returned by Guard, with
// the same admission, closing and error mapping as its other methods, or
// nil when the driver beneath keeps no records.
func GuardStore(d driver.Driver) driver.Store {
	g, ok := d.(*guard)
	if !ok {
		return nil
	}
	st, ok := g.d.(driver.Store)
	if !ok {
		return nil
	}
	return guardedStore{g: g, st: st}
}

type guardedStore struct {
	g  *guard
	st driver.Store
}

func (s guardedStore) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	return call(s.g, ctx, func(ctx context.Context) (driver.Record, error) { return s.st.GetRecord(ctx, key) })
}

func (s guardedStore) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	return call(s.g, ctx, func(ctx context.Context) ([]driver.Record, error) { return s.st.ListRecords(ctx, prefix) })
}

func (s guardedStore) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	return call(s.g, ctx, func(ctx context.Context) (driver.Record, error) {
		return s.st.PutRecord(ctx, key, value, ifVersion)
	})
}

func (s guardedStore) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	_, err := call(s.g, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.st.DeleteRecord(ctx, key, ifVersion)
	})
	return err
}

func (s guardedStore) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	rs, err := open(s.g, ctx, func(ctx context.Context) (driver.RecordStream, error) { return s.st.WatchRecords(ctx, prefix) })
	if err != nil {
		return nil, err
	}
	return guardedRecordStream{g: s.g, rs: rs}, nil
}

type guardedRecordStream struct {
	g  *guard
	rs driver.RecordStream
}

func (s guardedRecordStream) Next(ctx context.Context) ([]driver.Record, error) {
	return call(s.g, ctx, s.rs.Next)
}

func (s guardedRecordStream) Close() error { return s.rs.Close() }
