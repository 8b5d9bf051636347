package agent_test

import (
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

// Hostile neighbours: another program on the host, with the same access
// to the agent as its victim, misbehaves on purpose (issue 28).

// TestNeighbourCannotGuessTokens: a program that sees its own tokens
// reports 10,000 guesses near them (every dash-separated field shifted
// up and down, read in base 36 and in base 16). None is a victim's token
// and the victim's own reports all succeed.
func TestNeighbourCannotGuessTokens(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	mine := []string{f.pick(agent.PickRequest{Service: "api"}).Token}
	var victim []string
	for range 20 {
		victim = append(victim, f.pick(agent.PickRequest{Service: "api"}).Token)
	}
	mine = append(mine, f.pick(agent.PickRequest{Service: "api"}).Token)
	hijacked := 0
	for _, guess := range neighbours(mine, 625) {
		st, err := post(f.url+"/v1/report", agent.ReportRequest{Token: guess, Outcome: "failure"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st != http.StatusNotFound {
			hijacked++
		}
	}
	if hijacked > 0 {
		t.Errorf("%d guessed tokens were accepted", hijacked)
	}
	for _, tok := range victim {
		f.report(tok, "success", 1)
	}
}

// neighbours returns the tokens next to each of toks: each field between
// dashes, read as a number in base 36 and in base 16, shifted by ±1..n.
func neighbours(toks []string, n int) []string {
	var out []string
	for _, tok := range toks {
		fields := strings.Split(tok, "-")
		for i, field := range fields {
			for _, base := range []int{36, 16} {
				v, ok := new(big.Int).SetString(field, base)
				if !ok {
					continue
				}
				for d := -n; d <= n; d++ {
					w := new(big.Int).Add(v, big.NewInt(int64(d)))
					if d == 0 || w.Sign() < 0 {
						continue
					}
					s := w.Text(base)
					if pad := len(field) - len(s); pad > 0 {
						s = strings.Repeat("0", pad) + s
					}
					g := append([]string(nil), fields...)
					g[i] = s
					out = append(out, strings.Join(g, "-"))
				}
			}
		}
	}
	return out
}

// TestConcurrentRegistrationsKeepTheBound: 400 registrations at once,
// over HTTP on a real Redis, against a bound of 64. Exactly 64 succeed,
// the others are 429: the bound is checked and taken in one step.
func TestConcurrentRegistrationsKeepTheBound(t *testing.T) {
	const bound, n = 64, 400
	f := newFixture(t, startRedis(t), agent.Config{MaxServices: bound})
	var (
		wg          sync.WaitGroup
		ok, refused atomic.Int64
		start       = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			req := agent.RegisterRequest{Instance: registry.Instance{ID: fmt.Sprintf("r-%d", i), Service: "api", Address: "10.0.0.1:80"}}
			st, err := post(f.url+"/v1/register", req, nil)
			switch {
			case err != nil:
				t.Error(err)
			case st == http.StatusOK:
				ok.Add(1)
			case st == http.StatusTooManyRequests:
				refused.Add(1)
			default:
				t.Errorf("register %d: status %d", i, st)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != bound || refused.Load() != n-bound {
		t.Errorf("%d registered and %d refused, want %d and %d", ok.Load(), refused.Load(), bound, n-bound)
	}
	var locals []agent.Local
	if st := do(t, "GET", f.url+"/v1/register", nil, &locals); st != http.StatusOK || len(locals) != bound {
		t.Errorf("GET /v1/register: status %d, %d registrations, want %d", st, len(locals), bound)
	}
}

// TestJunkServicesAreForgotten: a program asks for 100 junk service
// names, past the bound of 64, and the next real service is refused.
// Once the junk is idle for Config.ServiceIdle the agent stops following
// it and the real service is served. A long poll in progress keeps its
// service followed meanwhile.
func TestJunkServicesAreForgotten(t *testing.T) {
	const idle = 300 * time.Millisecond
	f := newMemFixture(t, agent.Config{MaxServices: 64, ServiceIdle: idle})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	held := f.instances("held", "")
	poll := make(chan int, 1)
	go func() {
		st, _ := getStatus(fmt.Sprintf("%s/v1/services/held?index=%d&wait=%s", f.url, held.Index, 4*idle))
		poll <- st
	}()
	refused := 0
	for i := range 100 {
		st, err := getStatus(fmt.Sprintf("%s/v1/services/junk-%d", f.url, i))
		if err != nil {
			t.Fatal(err)
		}
		if st == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("100 junk services in a row: none refused, the bound of 64 did not bite")
	}
	start := time.Now()
	for {
		st, err := getStatus(f.url + "/v1/services/api")
		if err != nil {
			t.Fatal(err)
		}
		if st == http.StatusOK {
			break
		}
		if time.Since(start) > 10*idle {
			t.Fatalf("GET /v1/services/api still %d after %v: the junk is followed for good", st, time.Since(start))
		}
		time.Sleep(idle / 10) // polling the recovery, not waiting out a race
	}
	if st := <-poll; st != http.StatusOK {
		t.Errorf("long poll on a held service across evictions: status %d, want 200", st)
	}
}

// getStatus sends a GET and returns its status.
func getStatus(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
