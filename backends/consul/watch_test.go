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

// The blocking-query rules, checked against a scripted HTTP endpoint
// because a real agent cannot be made to send an index that goes
// backwards or is 0 on demand. Everything else runs against a real agent.
func TestBlockingQueryRules(t *testing.T) {
	const one = `[{"Node":{"Node":"n","Address":"127.0.0.1"},"Service":{"ID":"a","Service":"svc","Address":"127.0.0.1","Port":1,"Meta":{"roster_fields":"5,0,"}},"Checks":[]}]`
	type step struct {
		index string // index expected in the request ("" = none)
		reply uint64 // X-Consul-Index of the answer
		body  string
	}
	script := []step{
		{"", 10, `[]`},  // first read: not blocking; empty is delivered
		{"10", 12, one}, // a change
		{"12", 5, one},  // the index went backwards: reset
		{"", 0, `[]`},   // a fresh, non-blocking read; index 0 from the server
		{"1", 7, `[]`},  // never below 1
	}
	var mu sync.Mutex
	var got []string
	storm := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health/service/svc" || !r.URL.Query().Has("passing") {
			http.Error(w, "unexpected "+r.URL.String(), 400)
			return
		}
		mu.Lock()
		n := len(got)
		got = append(got, r.URL.Query().Get("index"))
		s := step{r.URL.Query().Get("index"), 7, `[]`} // after the script: a storm of empty wake-ups
		if n < len(script) {
			s = script[n]
		} else {
			storm++
		}
		mu.Unlock()
		w.Header().Set("X-Consul-Index", fmt.Sprint(s.reply))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, s.body)
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
	for i, want := range []int{0, 1, 0} {
		sn, err := st.Next(t.Context())
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		if len(sn.Instances) != want || sn.Instances == nil {
			t.Fatalf("Next #%d = %+v, want %d instances (empty is a delivery)", i, sn.Instances, want)
		}
		if want == 1 && sn.Instances[0].Weight != 5 {
			t.Fatalf("weight %d, want 5", sn.Instances[0].Weight)
		}
	}
	// Now Consul wakes the watch over and over without a change: nothing
	// is delivered, and the token bucket caps the request rate.
	const window = 600 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	if sn, err := st.Next(ctx); err == nil {
		t.Fatalf("a wake-up without change was delivered: %+v", sn)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range script {
		if got[i] != s.index {
			t.Errorf("request %d sent index=%q, want %q (all: %q)", i, got[i], s.index, got[:len(script)])
		}
	}
	for i, idx := range got[len(script):] {
		if idx != "7" {
			t.Errorf("storm request %d sent index=%q, want 7", i, idx)
		}
	}
	// 5 of burst (partly spent above) + one per 50ms, plus rounding.
	if limit := watchBurst + int(window/watchEvery) + 2; storm > limit {
		t.Errorf("%d requests in %v of wake-ups: the loop is not rate limited (limit %d)", storm, window, limit)
	}
	t.Logf("%d requests during %v of wake-ups", storm, window)
}

// Stream.Close releases a pending Next at once. The blocking query itself
// goes on, holding its connection, as the agent holds its slot until the
// query ends (see Driver.run); Driver.Close cancels it.
func TestStreamCloseReleasesBlockingQuery(t *testing.T) {
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-Index", "3")
		if r.URL.Query().Get("index") != "" {
			select { // block like a real blocking query
			case <-r.Context().Done():
				close(released)
			case <-time.After(10 * time.Second):
			}
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
	go func() { _, err := st.Next(context.Background()); errc <- err }()
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
		t.Fatal("Driver.Close did not cancel the blocking HTTP request")
	}
}
