package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// fleetChildEnv makes the test binary a fleet client (fleetChild) on the
// registry URL it holds, in place of running the tests.
const fleetChildEnv = "ROSTER_FLEET_CHILD"

// fleetWindow is how often a fleet client reports its calls.
const fleetWindow = 20 * time.Millisecond

// fleetChild is one client process of TestPolicyFleet: it calls service
// "api" until its stdin closes. Every fleetWindow it writes a line
// "w <unix ns> <percent> <calls to v1> <calls to v2> <failed>" per split
// percent its calls started under (-1: none yet), and a line
// "p <unix ns> <percent>" when the stored policy it follows changes. A
// call is counted under the policy it started with: one in flight
// across a change ends after it.
func fleetChild(url string) int {
	ctx := context.Background()
	reg, err := registry.Open(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer reg.Close()
	c, err := middleware.NewClient(reg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	hc := &http.Client{Timeout: 5 * time.Second}
	var mu sync.Mutex
	counts := map[float64]*[3]int{} // percent → v1, v2, failed
	count := func(pct float64, i int) {
		mu.Lock()
		if counts[pct] == nil {
			counts[pct] = &[3]int{}
		}
		counts[pct][i]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				pct := -1.0
				if p, ok := c.Policy("api"); ok && len(p.Split) == 1 {
					pct = p.Split[0].Percent
				}
				var body string
				err := c.Do(ctx, "api", func(ctx context.Context, in registry.Instance) error {
					resp, err := hc.Get("http://" + in.Address + "/")
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					body = string(b)
					return err
				})
				switch {
				case err != nil:
					count(pct, 2)
					fmt.Fprintln(os.Stderr, "call failed:", err)
				case body == "v2":
					count(pct, 1)
				default:
					count(pct, 0)
				}
			}
		})
	}
	t := time.NewTicker(fleetWindow)
	defer t.Stop()
	last := -1.0
	for {
		select {
		case <-stop:
			wg.Wait()
			return 0
		case now := <-t.C:
			if p, ok := c.Policy("api"); ok && len(p.Split) == 1 && p.Split[0].Percent != last {
				last = p.Split[0].Percent
				fmt.Fprintf(out, "p %d %v\n", time.Now().UnixNano(), last)
			}
			mu.Lock()
			for pct, n := range counts {
				fmt.Fprintf(out, "w %d %v %d %d %d\n", now.UnixNano(), pct, n[0], n[1], n[2])
			}
			clear(counts)
			mu.Unlock()
			out.Flush()
		}
	}
}

// fleetProc is the parent's view of one client process.
type fleetProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	wins  []fleetWin
	pol   map[float64]int64 // percent → when it applied (unix ns)
	done  chan struct{}
}

type fleetWin struct {
	at             int64
	pct            float64
	v1, v2, failed int
}

func startFleetProc(t *testing.T, url string) *fleetProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fleetChildEnv+"="+url)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &fleetProc{cmd: cmd, stdin: stdin, pol: map[float64]int64{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			p.mu.Lock()
			switch {
			case len(f) == 6 && f[0] == "w":
				at, _ := strconv.ParseInt(f[1], 10, 64)
				pct, _ := strconv.ParseFloat(f[2], 64)
				v1, _ := strconv.Atoi(f[3])
				v2, _ := strconv.Atoi(f[4])
				failed, _ := strconv.Atoi(f[5])
				p.wins = append(p.wins, fleetWin{at, pct, v1, v2, failed})
			case len(f) == 3 && f[0] == "p":
				at, _ := strconv.ParseInt(f[1], 10, 64)
				pct, _ := strconv.ParseFloat(f[2], 64)
				p.pol[pct] = at
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		<-p.done
		cmd.Wait()
	})
	return p
}

// calls sums the calls that started under split percent pct; any: all.
func (p *fleetProc) calls(pct float64, any bool) (w fleetWin) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.wins {
		if any || x.pct == pct {
			w.v1, w.v2, w.failed = w.v1+x.v1, w.v2+x.v2, w.failed+x.failed
		}
	}
	return w
}

func (p *fleetProc) applied(pct float64) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.pol[pct]
	return at, ok
}

// TestPolicyFleet is issue 27's fleet test: three client processes on
// each of etcd, Redis and Consul, and a canary raised 5 % → 50 % → 100 %
// by `roster policy set` (its code, in this process). Every process
// follows each change within 2 s, the split each one measures after it
// is within 4σ of its binomial, and no call fails.
func TestPolicyFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 9 client processes and three servers")
	}
	backends := map[string]func(t *testing.T) string{
		"etcd": func(t *testing.T) string { _, url := openReg(t, "/fleet"); return url },
		"redis": func(t *testing.T) string {
			return "redis://" + redistest.Start(t).Addr() + "/0?prefix=fleet"
		},
		"consul": func(t *testing.T) string { return "consul://" + consultest.Start(t).Addr() },
	}
	for _, name := range []string{"etcd", "redis", "consul"} {
		t.Run(name, func(t *testing.T) { fleet(t, backends[name](t)) })
	}
}

func fleet(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := registry.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	for _, version := range []string{"v1", "v1", "v2", "v2"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, version) }))
		t.Cleanup(srv.Close)
		if _, err := reg.Register(ctx, registry.Instance{Service: "api", Address: srv.Listener.Addr().String(), Version: version}); err != nil {
			t.Fatal(err)
		}
	}
	procs := make([]*fleetProc, 3)
	for i := range procs {
		procs[i] = startFleetProc(t, url)
	}
	for i, p := range procs { // every client calls before the first change
		deadline := time.Now().Add(30 * time.Second)
		for w := p.calls(0, true); w.v1+w.v2 == 0; w = p.calls(0, true) {
			if time.Now().After(deadline) {
				t.Fatalf("client %d made no call in 30 s", i)
			}
			time.Sleep(fleetWindow)
		}
	}
	for _, pct := range []float64{5, 50, 100} {
		set := time.Now().UnixNano()
		if _, errOut, err := execute(ctx, "--registry", url, "policy", "set", "api", "--split", fmt.Sprintf("v2=%v%%", pct)); err != nil {
			t.Fatalf("policy set: %v\n%s", err, errOut)
		}
		for i, p := range procs {
			deadline := time.Now().Add(5 * time.Second)
			at, ok := p.applied(pct)
			for ; !ok; at, ok = p.applied(pct) {
				if time.Now().After(deadline) {
					t.Fatalf("split %v%%: client %d did not follow within 5 s", pct, i)
				}
				time.Sleep(fleetWindow)
			}
			if d := time.Duration(at - set); d > 2*time.Second {
				t.Errorf("split %v%%: client %d followed after %v, want ≤ 2s", pct, i, d)
			} else {
				t.Logf("split %v%%: client %d followed after %v", pct, i, d.Round(time.Millisecond))
			}
		}
		time.Sleep(1500 * time.Millisecond) // calls under the new split
		for i, p := range procs {
			w := p.calls(pct, false)
			n := float64(w.v1 + w.v2)
			q := pct / 100
			sigma := math.Sqrt(n * q * (1 - q))
			if w.failed != 0 {
				t.Errorf("split %v%%: client %d: %d calls failed", pct, i, w.failed)
			}
			if n < 100 || math.Abs(float64(w.v2)-n*q) > 4*sigma+0.5 {
				t.Errorf("split %v%%: client %d sent %d of %.0f calls to v2, want %.0f ± %.0f", pct, i, w.v2, n, n*q, 4*sigma)
			} else {
				t.Logf("split %v%%: client %d sent %d of %.0f calls to v2 (want %.0f ± %.0f)", pct, i, w.v2, n, n*q, 4*sigma)
			}
		}
	}
	for i, p := range procs {
		if w := p.calls(0, true); w.failed != 0 {
			t.Errorf("client %d: %d calls failed in all", i, w.failed)
		}
	}
}
