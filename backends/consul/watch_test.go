package consul

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The blocking-query rules of the hub's checks queries, checked against
// a scripted HTTP endpoint because a real agent cannot be made to send an
// index that goes backwards or is 0 on demand. Everything else runs
// against a real agent. The hub blocks on a signal (a filter no check
// matches), then reads the watched services' checks without blocking.
func TestBlockingQueryRules(t *testing.T) {
	const check = `[{"Node":"n","CheckID":"service:a","Status":"passing","ServiceID":"a","ServiceName":"svc","ModifyIndex":%d}]`
	type step struct {
		index string // index expected in the request ("" = none)
		reply uint64 // X-Consul-Index of the answer
	}
	signals := []step{
		{"10", 12}, // a change
		{"12", 5},  // the index went backwards: reset
		{"1", 7},   // never below 1
	}
	type content struct {
		reply uint64
		body  string
	}
	contents := []content{
		{10, `[]`},                   // first read
		{12, fmt.Sprintf(check, 12)}, // a change of svc (then again for its node's checks)
		{5, fmt.Sprintf(check, 12)},  // the answer after the index went back
		{0, fmt.Sprintf(check, 12)},  // a fresh read: index 0 from the server
		{7, fmt.Sprintf(check, 12)},  // the change at 7
	}
	var mu sync.Mutex
	var got []string
	storm, reads, nContents, namedNodes := 0, 0, 0, false
	var last content
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/catalog/services": // never moves
			w.Header().Set("X-Consul-Index", "1")
			if r.URL.Query().Get("index") != "" {
				<-r.Context().Done()
				return
			}
			fmt.Fprint(w, `{}`)
			return
		case "/v1/health/service/svc":
			mu.Lock()
			reads++
			mu.Unlock()
			w.Header().Set("X-Consul-Index", "12")
			fmt.Fprint(w, `[{"Node":{"Node":"n","Address":"127.0.0.1"},"Service":{"ID":"a","Service":"svc","Address":"127.0.0.1","Port":1,"Meta":{"roster_fields":"5,0,"}},"Checks":[]}]`)
			return
		case "/v1/health/state/any":
		default:
			http.Error(w, "unexpected "+r.URL.String(), 400)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		if q.Get("filter") != noChecks {
			if q.Get("index") != "" {
				t.Errorf("a checks read sent index=%q: it must not block", q.Get("index"))
			}
			// The first read that names nodes is the hub's second pass,
			// for the checks of the nodes the read before found.
			withNodes := strings.Contains(q.Get("filter"), "Node matches")
			if !withNodes || namedNodes {
				if nContents < len(contents) {
					last = contents[nContents]
				}
				nContents++
			}
			namedNodes = withNodes
			w.Header().Set("X-Consul-Index", fmt.Sprint(last.reply))
			fmt.Fprint(w, last.body)
			return
		}
		n := len(got)
		got = append(got, q.Get("index"))
		s := step{q.Get("index"), 7} // after the script: a storm of wake-ups without change
		if n < len(signals) {
			s = signals[n]
		} else {
			storm++
		}
		w.Header().Set("X-Consul-Index", fmt.Sprint(s.reply))
		fmt.Fprint(w, `[]`)
	}))
	defer srv.Close()
	d, err := NewDriver(Options{Address: strings.TrimPrefix(srv.URL, "http://"), Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := d.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sn, err := st.Next(t.Context())
	if err != nil || len(sn.Instances) != 1 || sn.Instances[0].Weight != 5 {
		t.Fatalf("Next = %+v, %v; want the instance, weight 5", sn.Instances, err)
	}
	// Now Consul wakes the hub over and over without a change of svc: a
	// state delivered is the same (Registry drops repeats), and the token
	// bucket caps the request rate.
	const window = 600 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	for {
		again, err := st.Next(ctx)
		if err != nil {
			break
		}
		if !again.SameInstances(sn) {
			t.Fatalf("a wake-up without change delivered another state: %+v", again)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range signals {
		if got[i] != s.index {
			t.Errorf("signal %d sent index=%q, want %q (all: %q)", i, got[i], s.index, got[:len(signals)])
		}
	}
	if nContents != len(contents) {
		t.Errorf("%d reads of the checks, want %d: one per change, none per wake-up without one", nContents, len(contents))
	}
	for i, idx := range got[len(signals):] {
		if idx != "7" {
			t.Errorf("storm request %d sent index=%q, want 7", i, idx)
		}
	}
	// 5 of burst (partly spent above) + one per 50ms, plus rounding.
	if limit := watchBurst + int((window+time.Second)/watchEvery) + 2; storm > limit {
		t.Errorf("%d requests in %v of wake-ups: the loop is not rate limited (limit %d)", storm, window, limit)
	}
	// The service is read when its checks change, not on every wake-up:
	// the first read, the wake of the first checks seen, the reset.
	if reads > 4 {
		t.Errorf("svc read %d times; its checks changed at most 3 times", reads)
	}
	t.Logf("%d requests during %v of wake-ups; svc read %d times", storm, window, reads)
}

// Stream.Close releases a pending Next at once. The hub's blocking
// queries end when the last watch closes, or at Driver.Close.
func TestStreamCloseReleasesBlockingQuery(t *testing.T) {
	released := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-Index", "3")
		if r.URL.Query().Get("index") != "" {
			select { // block like a real blocking query
			case <-r.Context().Done():
				once.Do(func() { close(released) })
			case <-time.After(10 * time.Second):
			}
			return
		}
		if r.URL.Path == "/v1/catalog/services" {
			fmt.Fprint(w, `{}`)
			return
		}
		fmt.Fprint(w, `[]`)
	}))
	defer srv.Close()
	d, err := NewDriver(Options{Address: strings.TrimPrefix(srv.URL, "http://"), Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, _ := d.Watch(t.Context(), "svc")
	if _, err := st.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		// The hub's first answer may wake the stream: the same state again.
		for {
			if _, err := st.Next(context.Background()); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond) // let the query block; checked either way below
	st.Close()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("Next after Close = %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not release the blocking query")
	}
	d.Close()
	select {
	case <-released:
	case <-time.After(2 * time.Second):
		t.Fatal("closing the last watch and the driver did not cancel the blocking HTTP requests")
	}
}
