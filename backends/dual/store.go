package dual

import (
	"context"

	"github.com/roster-go/roster/registry/driver"
)

// storePair is a pairDriver whose preferred side keeps records. Records
// are read from the preferred side alone: a version is one side's, so
// compare-and-swap has one authority. Each write that succeeds there is
// copied to the other side unconditionally, when it keeps records, so
// that the records are already in place when the migration switches
// sides; a copy that fails is logged, not returned.
type storePair struct {
	*pairDriver
	st    driver.Store // the preferred side's
	other driver.Store // the other side's, or nil
}

var _ driver.Store = storePair{}

// withStore returns d with a record store when its preferred side has one.
func withStore(d *pairDriver) driver.Driver {
	st, ok := d.sides[d.primary].(driver.Store)
	if !ok {
		return d
	}
	other, _ := d.sides[1-d.primary].(driver.Store)
	return storePair{pairDriver: d, st: st, other: other}
}

func (p storePair) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	rec, err := p.st.GetRecord(ctx, key)
	return rec, p.classify(ctx, p.primary, err)
}

func (p storePair) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	recs, err := p.st.ListRecords(ctx, prefix)
	return recs, p.classify(ctx, p.primary, err)
}

func (p storePair) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	rec, err := p.st.PutRecord(ctx, key, value, ifVersion)
	if err != nil {
		return rec, p.classify(ctx, p.primary, err)
	}
	if p.other != nil {
		if _, err := p.other.PutRecord(ctx, key, value, ""); err != nil {
			p.log.Warn("dual: record not copied to the other side", "key", key, "side", sideNames[1-p.primary], "err", err)
		}
	}
	return rec, nil
}

func (p storePair) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	if err := p.st.DeleteRecord(ctx, key, ifVersion); err != nil {
		return p.classify(ctx, p.primary, err)
	}
	if p.other != nil {
		if err := p.other.DeleteRecord(ctx, key, ""); err != nil {
			p.log.Warn("dual: record deletion not copied to the other side", "key", key, "side", sideNames[1-p.primary], "err", err)
		}
	}
	return nil
}

func (p storePair) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	rs, err := p.st.WatchRecords(ctx, prefix)
	return rs, p.classify(ctx, p.primary, err)
}
