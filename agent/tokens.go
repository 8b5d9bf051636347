package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/roster-go/roster/middleware"
)

// pending is a pick waiting for its report.
type pending struct {
	p       middleware.Pending
	service string
	issued  time.Time
}

// tokens holds the picks waiting for a report. It is bounded twice: a
// token expires after ttl, and past max tokens the oldest expires early.
// Since every token lives for the same ttl, issue order is expiry order:
// a FIFO of the issued tokens is all the sweeper needs.
type tokens struct {
	ttl    time.Duration
	max    int
	prefix string
	expire func(*pending) // reports an expired pick as aborted

	mu    sync.Mutex
	seq   uint64
	live  map[string]*pending
	order []string // issued tokens, oldest first; reported ones are skipped
}

func newTokens(ttl time.Duration, max int, expire func(*pending)) *tokens {
	var b [4]byte
	_, _ = rand.Read(b[:]) // a fresh prefix per agent: a token from an earlier run is unknown, not someone else's
	return &tokens{ttl: ttl, max: max, prefix: hex.EncodeToString(b[:]) + "-", expire: expire, live: map[string]*pending{}}
}

// issue stores p and returns its token.
func (t *tokens) issue(p *pending) string {
	t.mu.Lock()
	t.seq++
	tok := t.prefix + strconv.FormatUint(t.seq, 36)
	t.live[tok] = p
	t.order = append(t.order, tok)
	evicted := t.trim(time.Time{})
	t.mu.Unlock()
	t.expireEach(evicted)
	return tok
}

// take removes and returns the pick of a token.
func (t *tokens) take(tok string) (*pending, bool) {
	t.mu.Lock()
	p, ok := t.live[tok]
	delete(t.live, tok)
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
// tokens: reported ones stuck behind a live one are compacted away.
func (t *tokens) trim(cutoff time.Time) []*pending {
	var out []*pending
	n := 0
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
	t.order = t.order[n:]
	if len(t.order) > 2*len(t.live)+1024 {
		kept := make([]string, 0, 2*len(t.live)+16)
		for _, tok := range t.order {
			if _, live := t.live[tok]; live {
				kept = append(kept, tok)
			}
		}
		t.order = kept
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
	t.live, t.order = map[string]*pending{}, nil
	t.mu.Unlock()
	t.expireEach(ps)
}
