package agent

import (
	"context"
	"crypto/rand"
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

// tokens holds the picks waiting for a report. It is bounded twice: a
// token expires after ttl, and past max tokens the oldest expires early.
// Since every token lives for the same ttl, issue order is expiry order:
// a FIFO of the issued tokens is all the sweeper needs. A token is the
// agent's prefix and a sequence number in base 36; the tables hold the
// number alone.
type tokens struct {
	ttl    time.Duration
	max    int
	prefix string
	expire func(*pending) // reports an expired pick as aborted

	mu    sync.Mutex
	seq   uint64
	live  map[uint64]*pending
	order []uint64 // issued tokens from head on, oldest first; reported ones are skipped
	head  int
}

func newTokens(ttl time.Duration, max int, expire func(*pending)) *tokens {
	var b [4]byte
	_, _ = rand.Read(b[:]) // a fresh prefix per agent: a token from an earlier run is unknown, not someone else's
	return &tokens{ttl: ttl, max: max, prefix: hex.EncodeToString(b[:]) + "-", expire: expire, live: map[uint64]*pending{}}
}

// issue stores p and returns its token's sequence number.
func (t *tokens) issue(p *pending) uint64 {
	t.mu.Lock()
	t.seq++
	seq := t.seq
	t.live[seq] = p
	t.order = append(t.order, seq)
	evicted := t.trim(time.Time{})
	t.mu.Unlock()
	t.expireEach(evicted)
	return seq
}

// appendToken appends the token of sequence number seq.
func (t *tokens) appendToken(b []byte, seq uint64) []byte {
	return strconv.AppendUint(append(b, t.prefix...), seq, 36)
}

// token returns the token of sequence number seq.
func (t *tokens) token(seq uint64) string { return string(t.appendToken(nil, seq)) }

// seqOf returns the sequence number of tok, if it is a token of this
// agent spelled as appendToken spells it.
func (t *tokens) seqOf(tok string) (uint64, bool) {
	n, ok := strings.CutPrefix(tok, t.prefix)
	if !ok || n == "" || n[0] == '0' || strings.ContainsFunc(n, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z') }) {
		return 0, false
	}
	seq, err := strconv.ParseUint(n, 36, 64)
	return seq, err == nil
}

// take removes and returns the pick of a token.
func (t *tokens) take(tok string) (*pending, bool) {
	seq, ok := t.seqOf(tok)
	if !ok {
		return nil, false
	}
	t.mu.Lock()
	p, ok := t.live[seq]
	delete(t.live, seq)
	t.mu.Unlock()
	return p, ok
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
