package agent

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/mwhook"
)

// pending is a pick waiting for its report.
type pending struct {
	p       mwhook.Pending
	service string
	issued  time.Time
	key     [keyLen]byte // the token's secret part
}

// pendingPool recycles the pendings of reported and expired picks.
var pendingPool = sync.Pool{New: func() any { return new(pending) }}

// newPending returns a pending from the pool.
func newPending(p mwhook.Pending, service string, issued time.Time) *pending {
	pp := pendingPool.Get().(*pending)
	*pp = pending{p: p, service: service, issued: issued}
	return pp
}

// release returns p to the pool once its pick is reported or expired.
func (p *pending) release() {
	*p = pending{}
	pendingPool.Put(p)
}

// keyLen is the length of a token's random key: 96 bits.
const keyLen = 12

// tokenID names one pick: its sequence number, which the tables are
// keyed by, and a random key that only the picker was told. A program
// that sees its own tokens cannot guess a neighbour's: the sequence
// number is public, the key is fresh from crypto/rand.
type tokenID struct {
	seq uint64
	key [keyLen]byte
}

// tokens holds the picks waiting for a report. It is bounded twice: a
// token expires after ttl, and past max tokens the oldest expires early.
// Since every token lives for the same ttl, issue order is expiry order:
// a FIFO of the issued tokens is all the sweeper needs. A token is its
// sequence number in base 36, a dash and its key in hex.
type tokens struct {
	ttl    time.Duration
	max    int
	expire func(*pending) // reports an expired pick as aborted

	mu    sync.Mutex
	seq   uint64
	live  map[uint64]*pending
	order []uint64 // issued tokens from head on, oldest first; reported ones are skipped
	head  int
}

func newTokens(ttl time.Duration, max int, expire func(*pending)) *tokens {
	return &tokens{ttl: ttl, max: max, expire: expire, live: map[uint64]*pending{}}
}

// issue stores p under a fresh key and returns its token.
func (t *tokens) issue(p *pending) tokenID {
	_, _ = rand.Read(p.key[:]) // never fails (it crashes the program first)
	t.mu.Lock()
	t.seq++
	id := tokenID{seq: t.seq, key: p.key}
	t.live[id.seq] = p
	t.order = append(t.order, id.seq)
	evicted := t.trim(time.Time{})
	t.mu.Unlock()
	t.expireEach(evicted)
	return id
}

// appendToken appends the spelling of token id.
func appendToken(b []byte, id tokenID) []byte {
	b = append(strconv.AppendUint(b, id.seq, 36), '-')
	return hex.AppendEncode(b, id.key[:])
}

// String returns the spelling of token id.
func (id tokenID) String() string { return string(appendToken(nil, id)) }

// parseToken reads tok, if it is spelled as appendToken spells it.
func parseToken(tok string) (tokenID, bool) {
	n, key, ok := strings.Cut(tok, "-")
	if !ok || n == "" || n[0] == '0' || len(key) != 2*keyLen || strings.ContainsFunc(n, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z') }) {
		return tokenID{}, false
	}
	var id tokenID
	for i := range keyLen {
		hi, lo := unhex(key[2*i]), unhex(key[2*i+1])
		if hi < 0 || lo < 0 {
			return tokenID{}, false
		}
		id.key[i] = byte(hi<<4 | lo)
	}
	seq, err := strconv.ParseUint(n, 36, 64)
	id.seq = seq
	return id, err == nil
}

// unhex returns the value of a lower-case hex digit, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	}
	return -1
}

// take removes and returns the pick of a token. A token whose key is
// wrong leaves the pick in place: guessing does not spoil it.
func (t *tokens) take(tok string) (*pending, bool) {
	id, ok := parseToken(tok)
	if !ok {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.live[id.seq]
	if !ok || subtle.ConstantTimeCompare(p.key[:], id.key[:]) != 1 {
		return nil, false
	}
	delete(t.live, id.seq)
	return p, true
}

// len returns how many picks wait for a report.
func (t *tokens) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// trim drops from the front of the order the tokens that are reported,
// over the bound, or issued before cutoff, and returns the live ones
// among them; t.mu held. The order keeps at most about twice the live
// tokens: reported ones stuck behind a live one are compacted away. Its
// array is reused: the dropped front is copied over once it is as long
// as the rest, so that issue does not allocate in the steady state.
func (t *tokens) trim(cutoff time.Time) []*pending {
	var out []*pending
	n := t.head
	for ; n < len(t.order); n++ {
		tok := t.order[n]
		p, live := t.live[tok]
		if live && len(t.live) <= t.max && !p.issued.Before(cutoff) {
			break
		}
		if live {
			delete(t.live, tok)
			out = append(out, p)
		}
	}
	t.head = n
	switch rest := t.order[n:]; {
	case len(rest) > 2*len(t.live)+1024:
		kept := make([]uint64, 0, 2*len(t.live)+16)
		for _, tok := range rest {
			if _, live := t.live[tok]; live {
				kept = append(kept, tok)
			}
		}
		t.order, t.head = kept, 0
	case n >= len(rest):
		t.order, t.head = t.order[:copy(t.order, rest)], 0
	}
	return out
}

func (t *tokens) expireEach(ps []*pending) {
	for _, p := range ps {
		t.expire(p)
	}
}

// sweep expires tokens older than ttl until ctx ends.
func (t *tokens) sweep(ctx context.Context) {
	tick := time.NewTicker(max(t.ttl/8, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			t.mu.Lock()
			expired := t.trim(now.Add(-t.ttl))
			t.mu.Unlock()
			t.expireEach(expired)
		}
	}
}

// expireAll expires every pending token (on Close).
func (t *tokens) expireAll() {
	t.mu.Lock()
	ps := make([]*pending, 0, len(t.live))
	for _, p := range t.live {
		ps = append(ps, p)
	}
	t.live, t.order, t.head = map[uint64]*pending{}, nil, 0
	t.mu.Unlock()
	t.expireEach(ps)
}
