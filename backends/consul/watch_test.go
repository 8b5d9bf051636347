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

// The blocking-query rules of the hub's checks query, checked against a
// scripted HTTP endpoint because a real agent cannot be made to send an
// index that goes backwards or is 0 on demand. Everything else runs
// against a real agent.
func TestBlockingQueryRules(t *testing.T) {
	const check = `[{"Node":"n","CheckID":"service:a","Status":"passing","ServiceName":"svc","ModifyIndex":%d}]`
	type step struct {
		index string // index expected in the request ("" = none)
		reply uint64 // X-Consul-Index of the answer
		body  string
	}
	script := []step{
		{"", 10, `[]`},                     // first read: not blocking
		{"10", 12, fmt.Sprintf(check, 12)}, // a change of svc
		{"12", 5, fmt.Sprintf(check, 12)},  // the index went backwards: reset
		{"", 0, fmt.Sprintf(check, 12)},    // a fresh, non-blocking read; index 0 from the server
		{"1", 7, fmt.Sprintf(check, 12)},   // never below 1
	}
	var mu sync.Mutex
	var got []string
	storm, reads := 0, 0
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
		n := len(got)
		got = append(got, r.URL.Query().Get("index"))
		s := step{r.URL.Query().Get("index"), 7, fmt.Sprintf(check, 12)} // after the script: a storm of wake-ups without change
		if n < len(script) {
			s = script[n]
		} else {
			storm++
		}
		mu.Unlock()
		w.Header().Set("X-Consul-Index", fmt.Sprint(s.reply))
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
