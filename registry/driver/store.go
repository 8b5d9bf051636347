package driver

import (
	"context"
	"errors"
)

// Store is an optional interface a Driver implements to keep small
// records beside its instances: the traffic policies and operator
// overrides that every client of a fleet reads. A record has no TTL: it
// stays until it is deleted, across restarts of every process.
//
// Keys are paths of segments of letters, digits, '.', '_' and '-'
// joined by '/' ("policy/user-svc"), at most MaxRecordKey bytes. Values
// are opaque bytes, at most MaxRecordSize. Registry validates both before
// a driver sees them, and checks the context and closing as it does for
// the other methods.
//
// Versions are opaque strings the driver chooses (a revision, an index, a
// counter); they change on every write of a key and are never reused
// for that key while it exists.
type Store interface {
	// GetRecord returns the record at key, or an error of kind
	// ErrNotFound when there is none.
	GetRecord(ctx context.Context, key string) (Record, error)

	// ListRecords returns the records whose keys start with prefix, in
	// any order. prefix is "" or ends in '/'.
	ListRecords(ctx context.Context, prefix string) ([]Record, error)

	// PutRecord writes value at key and returns the record as stored,
	// with its new Version. ifVersion is a precondition: "" writes
	// unconditionally, VersionAbsent only if the key does not exist, and
	// any other value only if the stored record has that Version. A
	// failed precondition is ErrConflict and writes nothing.
	PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (Record, error)

	// DeleteRecord removes the record at key, with the same precondition
	// as PutRecord ("" unconditionally). Deleting a missing record
	// without a precondition is not an error.
	DeleteRecord(ctx context.Context, key, ifVersion string) error

	// WatchRecords follows the records under prefix ("" or ending in
	// '/'). The stream's first Next returns the current records.
	WatchRecords(ctx context.Context, prefix string) (RecordStream, error)
}

// Record is one stored key and value, at a Version.
type Record struct {
	Key     string
	Value   []byte
	Version string
}

// RecordStream follows the records under one prefix.
type RecordStream interface {
	// Next blocks until the records under the prefix may have changed,
	// and returns all of them, in any order. It may return the same set
	// again. An error means the stream is broken: the caller closes it
	// and opens another.
	Next(ctx context.Context) ([]Record, error)

	// Close stops the stream. It does not block on the network.
	Close() error
}

// VersionAbsent, as PutRecord's ifVersion, writes only if the key does
// not exist yet. No driver uses it as a Version.
const VersionAbsent = "absent"

// Bounds on records, checked by Registry before any write.
const (
	MaxRecordKey  = 256
	MaxRecordSize = 64 << 10
)

// ErrConflict reports a record write whose version precondition failed:
// another writer got there first. Read again and retry.
var ErrConflict = errors.New("registry: version conflict")
