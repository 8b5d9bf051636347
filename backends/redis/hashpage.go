package redis

import (
	"context"
	"errors"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// relistPage is the most records one command of a snapshot reads. One
// script that reads 100,000 records blocks the server for every tenant
// for a tenth of a second or more; pages of 1,000 take about a
// millisecond each.
const relistPage = 1000

// errPaged is snapshotOnce's answer for a service too large to read in
// one script.
var errPaged = errors.New("redis: snapshot too large for one script")

// pagedSnapshot reads a large service in pages, not in one atomic step:
// ZSCAN over the index and MGET of the records, page by page. It started
// at revision rev, after log entry lastID. The pages may mix states, so it
// then reads the head again and replays the log entries logged meanwhile
// (each carries its record), which gives the state at the new head. When
// that replay has a gap (a trimmed log, a wipe), it falls back to one
// atomic read.
func (h *hashLayout) pagedSnapshot(ctx context.Context, c goredis.UniversalClient, service string, rev uint64, lastID string) (driver.Snapshot, string, error) {
	k := h.hkeys(service)
	now, err := c.Time(ctx).Result()
	if err != nil {
		return driver.Snapshot{}, "", err
	}
	insts, err := h.pages(ctx, c, k, now.UnixMilli())
	if err != nil {
		return driver.Snapshot{}, "", err
	}
	head, headID, err := h.snapshotOnce(ctx, c, service, 0)
	switch {
	case err == nil: // the service became empty meanwhile
		return head, headID, nil
	case !errors.Is(err, errPaged):
		return driver.Snapshot{}, "", err
	}
	if head.Revision != rev {
		rev, err = replay(ctx, c, k.log, insts, rev, lastID, headID)
		if err != nil {
			return driver.Snapshot{}, "", err
		}
		if rev != head.Revision {
			return h.snapshotOnce(ctx, c, service, -1) // a gap: read atomically
		}
	}
	s := driver.Snapshot{Service: service, Revision: rev, At: time.Now(), Instances: make([]driver.Instance, 0, len(insts))}
	for _, in := range insts {
		s.Instances = append(s.Instances, in)
	}
	return s, headID, nil
}

// pages reads the live members of a service and their records, a page at
// a time. ZSCAN returns every member present throughout at least once;
// the others are in the log replayed afterwards.
func (h *hashLayout) pages(ctx context.Context, c goredis.UniversalClient, k hashKeys, nowMs int64) (map[string]driver.Instance, error) {
	insts := map[string]driver.Instance{}
	var cursor uint64
	for {
		pairs, next, err := c.ZScan(ctx, k.idx, cursor, "", relistPage).Result()
		if err != nil {
			return nil, err
		}
		var ids, keys []string
		for i := 0; i+1 < len(pairs); i += 2 {
			if score, err := strconv.ParseFloat(pairs[i+1], 64); err == nil && score > float64(nowMs) {
				ids, keys = append(ids, pairs[i]), append(keys, k.inst+pairs[i])
			}
		}
		if len(keys) > 0 {
			vals, err := c.MGet(ctx, keys...).Result()
			if err != nil {
				return nil, err
			}
			for i, v := range vals {
				data, _ := v.(string)
				if in, err := decodeRecord(data); err == nil && in.ID == ids[i] {
					insts[in.ID] = in
				}
			}
		}
		if cursor = next; cursor == 0 {
			return insts, nil
		}
	}
}

// replay applies the log entries after from up to and including to, from
// revision rev on, and returns the revision reached. Entries whose
// revision does not move forward (not Roster's) are skipped; a forward gap
// ends the replay early.
func replay(ctx context.Context, c goredis.UniversalClient, log string, insts map[string]driver.Instance, rev uint64, from, to string) (uint64, error) {
	for idLess(from, to) {
		msgs, err := c.XRangeN(ctx, log, "("+from, to, relistPage).Result()
		if err != nil || len(msgs) == 0 {
			return rev, err // none: trimmed meanwhile
		}
		for _, m := range msgs {
			from = m.ID
			v, _ := m.Values["rev"].(string)
			if r, err := strconv.ParseUint(v, 10, 64); err != nil || r <= rev {
				continue
			}
			next, _, ok := applyEntry(insts, rev, m)
			if !ok {
				return rev, nil
			}
			rev = next
		}
	}
	return rev, nil
}
