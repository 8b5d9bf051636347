package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// The keys layout stores what the article stores: one String per
// instance, JSON with string fields, TTL in seconds.

// keysLayout stores one String per instance, as the article does (the
// package doc, "Layout keys").
type keysLayout struct {
	*conn
	warnFlags sync.Once // the notify-keyspace-events warning, once per driver
	hub       keysHub   // what the driver's watches share
}

// limits: SET EX and EXPIRE take whole seconds.
func (ks *keysLayout) limits() driver.Limits {
	return driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second}
}

// articleValue is the JSON value, fields and order as the article writes
// them. Endpoints is Roster's: the named endpoints in the compact form of
// backend.FormatEndpoints, absent for a one-port instance, so that such a
// record is the article's byte for byte.
type articleValue struct {
	Addr      string `json:"addr"`
	Version   string `json:"version"`
	Weight    string `json:"weight"`
	Metadata  string `json:"metadata"`
	Endpoints string `json:"endpoints,omitempty"`
}

// Roster's own fields inside the metadata string. User keys cannot start
// with "roster_" (registry validation reserves it for backends).
const (
	mdZone    = "zone"          // Instance.Zone, as in the article
	mdID      = "roster_id"     // Instance.ID
	mdRegion  = "roster_region" // Instance.Region: no key of the article, so one of ours
	mdTags    = "roster_tags"   // Instance.Tags, %-escaped, '|'-separated
	mdUser    = "roster_m_"     // a user metadata key that collides with "zone"
	metaEsc   = "%,="           // escaped in metadata values
	tagEscape = "%,=|"          // escaped in tags
)

func escape(s, set string) string {
	if !strings.ContainsAny(s, set) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(set, s[i]) >= 0 {
			fmt.Fprintf(&b, "%%%02X", s[i])
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// unescape decodes %XX; anything else, a lone '%' included, stays as is,
// so values written by other tools ("cpu=50%") read back unchanged.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// encodeArticle renders an instance as the article's JSON.
func encodeArticle(in driver.Instance) (string, error) {
	var pairs []string
	if in.Zone != "" {
		pairs = append(pairs, mdZone+"="+escape(in.Zone, metaEsc))
	}
	for _, k := range slices.Sorted(maps.Keys(in.Metadata)) {
		name := k
		if k == mdZone {
			name = mdUser + k
		}
		pairs = append(pairs, name+"="+escape(in.Metadata[k], metaEsc))
	}
	pairs = append(pairs, mdID+"="+in.ID)
	if in.Region != "" {
		pairs = append(pairs, mdRegion+"="+escape(in.Region, metaEsc))
	}
	if len(in.Tags) > 0 {
		tags := make([]string, len(in.Tags))
		for i, t := range in.Tags {
			tags[i] = escape(t, tagEscape)
		}
		pairs = append(pairs, mdTags+"="+strings.Join(tags, "|"))
	}
	b, err := json.Marshal(articleValue{
		Addr: in.Address, Version: in.Version, Weight: strconv.FormatUint(uint64(in.Weight), 10),
		Metadata: strings.Join(pairs, ","), Endpoints: backend.FormatEndpoints(in.Endpoints),
	})
	if err != nil {
		return "", fmt.Errorf("%w: redis: encode %s: %v", driver.ErrInvalid, in.ID, err)
	}
	return string(b), nil
}

// decodeArticle reads a value written by us or by a script following the
// article. Fields may be strings or numbers; unknown fields are ignored.
// addrFromKey is used when the value has no addr.
func decodeArticle(service, addrFromKey, val string) (driver.Instance, bool) {
	var raw map[string]any
	if err := json.Unmarshal([]byte(val), &raw); err != nil {
		return driver.Instance{}, false
	}
	str := func(k string) string {
		switch v := raw[k].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			return strconv.FormatBool(v)
		}
		return ""
	}
	in := driver.Instance{Service: service, Address: str("addr"), Version: str("version"), Weight: backend.DefaultWeight}
	if in.Address == "" {
		in.Address = addrFromKey
	}
	if w := str("weight"); w != "" {
		if n, err := strconv.ParseFloat(w, 64); err == nil && n >= 0 {
			// A script's weight past the portable limit is the limit, as on
			// Kubernetes: the record stays in, at the highest share.
			in.Weight = uint32(min(n, backend.MaxWeight))
		}
	}
	for _, p := range strings.Split(str("metadata"), ",") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		switch {
		case k == mdID:
			in.ID = v
		case k == mdTags:
			for _, t := range strings.Split(v, "|") {
				in.Tags = append(in.Tags, unescape(t))
			}
		case k == mdZone:
			in.Zone = unescape(v)
		case k == mdRegion:
			in.Region = unescape(v)
		case strings.HasPrefix(k, mdUser):
			setMeta(&in, strings.TrimPrefix(k, mdUser), unescape(v))
		case k != "":
			setMeta(&in, k, unescape(v))
		}
	}
	if in.ID == "" {
		in.ID = articleID(service, in.Address)
	}
	eps, ok := backend.ParseEndpoints(str("endpoints"))
	in.Endpoints = eps
	return in, ok && in.Address != ""
}

func setMeta(in *driver.Instance, k, v string) {
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	in.Metadata[k] = v
}

// articleID is the ID of a record written without one: derived from the
// service and address, so it is stable across reads and processes.
func articleID(service, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "0"
	}
	id := service + "-" + host + "-" + port
	return strings.Map(func(r rune) rune {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '_'
	}, id)
}

// keyPrefix is "<prefix>:<service>:", the start of every key of service.
func (ks *keysLayout) keyPrefix(service string) string { return ks.o.Prefix + ":" + service + ":" }

// globEscape escapes SCAN MATCH pattern characters.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownerLua extracts roster_id from a stored value (” when absent or not
// JSON: a record written by another tool).
const ownerLua = `
local function owner(v)
  if not v then return nil end
  local ok, t = pcall(cjson.decode, v)
  if not ok or type(t) ~= 'table' or type(t.metadata) ~= 'string' then return '' end
  return string.match(',' .. t.metadata .. ',', ',roster_id=([^,]*),') or ''
end
`

// claimScript writes the record to the address's key unless another live
// Roster registration holds it. A record without roster_id (written by a
// script following the article) is for the same address and is replaced.
// KEYS: key. ARGV: id, value, ttl seconds. Returns 1 if written.
var claimScript = luaScript(ownerLua + `
local o = owner(redis.call('GET', KEYS[1]))
if o == nil or o == '' or o == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
`)

// expireScript is the article's EXPIRE heartbeat, refusing to extend a
// key that now belongs to someone else. KEYS: key. ARGV: id, ttl seconds.
var expireScript = luaScript(ownerLua + `
if owner(redis.call('GET', KEYS[1])) ~= ARGV[1] then return 0 end
return redis.call('EXPIRE', KEYS[1], ARGV[2])
`)

// delOwnScript deletes the key if it still holds our record.
var delOwnScript = luaScript(ownerLua + `
if owner(redis.call('GET', KEYS[1])) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)

type keysReg struct {
	ks  *keysLayout
	svc string
	id  string
	key string // where the record lives now
	ttl time.Duration
}

func ttlSeconds(ttl time.Duration) int64 { return backend.TTLUnits(ttl, time.Second) }

func (ks *keysLayout) register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	r := &keysReg{ks: ks, svc: inst.Service, id: inst.ID, ttl: ttl}
	if err := r.write(ctx, inst, "register"); err != nil {
		return nil, err
	}
	return r, nil
}

// write stores inst under the address's key if it can claim it, else
// under the key suffixed with the ID.
func (r *keysReg) write(ctx context.Context, inst driver.Instance, op string) error {
	val, err := encodeArticle(inst)
	if err != nil {
		return err
	}
	primary := r.ks.keyPrefix(inst.Service) + inst.Address
	alt := primary + ":" + inst.ID
	secs := ttlSeconds(r.ttl)
	ok, err := claimScript.Run(ctx, r.ks.c, []string{primary}, inst.ID, val, secs).Int()
	if err != nil {
		return r.ks.wrap(op+" "+inst.Service+"/"+inst.ID, err)
	}
	key := primary
	if ok == 1 {
		// We own the address's key: drop a copy left under the suffixed one.
		err = r.ks.c.Del(ctx, alt).Err()
	} else {
		key = alt
		err = r.ks.c.Set(ctx, alt, val, time.Duration(secs)*time.Second).Err()
	}
	if err != nil {
		return r.ks.wrap(op+" "+inst.Service+"/"+inst.ID, err)
	}
	if r.key != "" && r.key != key {
		// Moved (the address's key became free or was taken): remove the old copy.
		_ = delOwnScript.Run(ctx, r.ks.c, []string{r.key}, r.id).Err()
	}
	r.key = key
	return nil
}

func (r *keysReg) Heartbeat(ctx context.Context) error {
	n, err := expireScript.Run(ctx, r.ks.c, []string{r.key}, r.id, ttlSeconds(r.ttl)).Int()
	if err != nil {
		return r.ks.wrap("heartbeat "+r.svc+"/"+r.id, err)
	}
	if n == 0 {
		return fmt.Errorf("redis %s: heartbeat %s/%s: key %s gone: %w", r.ks.name, r.svc, r.id, r.key, driver.ErrNotFound)
	}
	return nil
}

func (r *keysReg) Update(ctx context.Context, inst driver.Instance) error {
	return r.write(ctx, inst, "update")
}

func (r *keysReg) Deregister(ctx context.Context) error {
	if err := delOwnScript.Run(ctx, r.ks.c, []string{r.key}, r.id).Err(); err != nil {
		return r.ks.wrap("deregister "+r.svc+"/"+r.id, err)
	}
	return nil
}

// scan returns every key matching pattern, on every master of a Cluster.
func (ks *keysLayout) scan(ctx context.Context, pattern string) ([]string, error) {
	seen := map[string]struct{}{}
	one := func(ctx context.Context, c goredis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				seen[k] = struct{}{}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := ks.c.(*goredis.ClusterClient); ok {
		var mu = make(chan struct{}, 1)
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return one(ctx, c)
		})
	} else {
		err = one(ctx, ks.c)
	}
	if err != nil {
		return nil, err
	}
	out := slices.Collect(maps.Keys(seen))
	slices.Sort(out)
	return out, nil
}

// list reads every record of service. Its revision is the server's
// clock (µs) taken before the scan: later lists have higher revisions.
func (ks *keysLayout) list(ctx context.Context, service string) (driver.Snapshot, error) {
	now, err := ks.c.Time(ctx).Result()
	if err != nil {
		return driver.Snapshot{}, ks.wrap("list "+service, err)
	}
	keys, err := ks.scan(ctx, globEscape(ks.keyPrefix(service))+"*")
	if err != nil {
		return driver.Snapshot{}, ks.wrap("list "+service, err)
	}
	_, vals, err := ks.fetch(ctx, keys, false)
	if err != nil {
		return driver.Snapshot{}, ks.wrap("list "+service, err)
	}
	s, err := ks.build(ctx, service, vals, now)
	if err != nil {
		return driver.Snapshot{}, ks.wrap("list "+service, err)
	}
	return s, nil
}

// fetch reads keys in one pipeline, after the server's clock when
// withTime is set. Keys that are gone, or hold another type, are left out.
func (ks *keysLayout) fetch(ctx context.Context, keys []string, withTime bool) (time.Time, map[string]string, error) {
	vals := make(map[string]string, len(keys))
	if len(keys) == 0 && !withTime {
		return time.Time{}, vals, nil
	}
	var tc *goredis.TimeCmd
	cmds := make([]*goredis.StringCmd, len(keys))
	_, err := ks.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if withTime {
			tc = p.Time(ctx)
		}
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	var reply goredis.Error
	if err != nil && !errors.As(err, &reply) {
		// A reply error (a key of another type under the prefix) only
		// fails its own GET; anything else fails the read.
		return time.Time{}, nil, err
	}
	var now time.Time
	if withTime {
		if now, err = tc.Result(); err != nil {
			return time.Time{}, nil, err
		}
	}
	for i, k := range keys {
		if v, err := cmds[i].Result(); err == nil {
			vals[k] = v // else expired between SCAN and GET
		}
	}
	return now, vals, nil
}

// build makes a snapshot of service from its keys' values, read after
// the server's clock showed now.
func (ks *keysLayout) build(ctx context.Context, service string, vals map[string]string, now time.Time) (driver.Snapshot, error) {
	prefix := ks.keyPrefix(service)
	var cands []backend.Candidate
	var from []string // the key of each candidate
	seen := map[string]int{}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		val, suffix := vals[k], strings.TrimPrefix(k, prefix)
		in, ok := decodeArticle(service, suffix, val)
		if !ok {
			continue
		}
		var st backend.Standing
		if strings.Contains(val, mdID+"=") && (suffix == in.Address || suffix == in.Address+":"+in.ID) {
			st = backend.Own // where register writes it: under its own address
		}
		cands = append(cands, backend.Candidate{Instance: in, Standing: st})
		from = append(from, k)
		seen[in.ID]++
	}
	if err := ks.live(ctx, cands, from, seen); err != nil {
		return driver.Snapshot{}, err
	}
	s := driver.Snapshot{Service: service, Revision: uint64(now.UnixMicro()), At: time.Now(),
		Instances: backend.Resolve(service, cands)}
	if s.Instances == nil {
		s.Instances = []driver.Instance{}
	}
	return s, nil
}

// live marks Live the candidates whose key has a TTL, among those whose
// ID more than one key claims (seen counts them): a record without one
// is nobody's lease. Keys are sorted, so key order alone would let any
// writer hide an instance under a key that sorts first.
func (ks *keysLayout) live(ctx context.Context, cands []backend.Candidate, keys []string, seen map[string]int) error {
	var ttls []*goredis.DurationCmd
	var which []int
	for i, c := range cands {
		if seen[c.ID] > 1 {
			which = append(which, i)
		}
	}
	if len(which) == 0 {
		return nil
	}
	_, err := ks.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, i := range which {
			ttls = append(ttls, p.PTTL(ctx, keys[i]))
		}
		return nil
	})
	var reply goredis.Error
	if errors.As(err, &reply) {
		// An ACL from before PTTL was needed (NOPERM): decide by layout
		// alone rather than fail every read.
		return nil
	}
	if err != nil {
		return err
	}
	for n, i := range which {
		if d, err := ttls[n].Result(); err == nil && d > 0 {
			cands[i].Standing |= backend.Live
		}
	}
	return nil
}

func (ks *keysLayout) services(ctx context.Context) ([]string, error) {
	keys, err := ks.scan(ctx, globEscape(ks.o.Prefix+":")+"*")
	if err != nil {
		return nil, ks.wrap("services", err)
	}
	set := map[string]struct{}{}
	for _, k := range keys {
		name, _, ok := strings.Cut(strings.TrimPrefix(k, ks.o.Prefix+":"), ":")
		if ok && backend.ValidateService(name) == nil {
			set[name] = struct{}{}
		}
	}
	out := slices.Sorted(maps.Keys(set))
	if out == nil {
		out = []string{}
	}
	return out, nil
}
