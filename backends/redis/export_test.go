package redis

import (
	"context"
	"errors"

	"github.com/roster-go/roster/registry/driver"
)

// Script SHAs, to tell scripts apart in MONITOR output: tests count
// sweeps, sweeper claims and relists across processes.
var (
	SweepScriptSHA        = sweepScript.Hash()
	SweeperClaimScriptSHA = sweeperClaimScript.Hash()
	SnapshotScriptSHA     = snapshotScript.Hash()
	ServicesScriptSHA     = servicesScript.Hash()
)

// PublicOptions are the options registered as public with driver.Register.
var PublicOptions = publicOptions

// Head returns a hash-layout service's revision and last log entry ID,
// as a paged read starts from them.
func Head(ctx context.Context, d *Driver, service string) (uint64, string, error) {
	h := d.layout.(*hashLayout)
	s, lastID, err := h.snapshotOnce(ctx, d.c, service, 0)
	if err != nil && !errors.Is(err, errPaged) {
		return 0, "", err
	}
	return s.Revision, lastID, nil
}

// PagedSnapshot reads a hash-layout service in pages from the revision
// and entry Head returned.
func PagedSnapshot(ctx context.Context, d *Driver, service string, rev uint64, lastID string) (driver.Snapshot, error) {
	s, _, err := d.layout.(*hashLayout).pagedSnapshot(ctx, d.c, service, rev, lastID)
	return s, err
}
