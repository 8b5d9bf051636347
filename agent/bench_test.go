package agent_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// newBenchAgent returns an agent with 3 instances of api.
func newBenchAgent(b *testing.B) *agent.Agent {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	for _, id := range []string{"a", "b", "c"} {
		reg.Register(b.Context(), registry.Instance{ID: id, Service: "api", Address: "10.0.0.1:80"})
	}
	a, err := agent.New(agent.Config{Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(); reg.Close() })
	return a
}

// benchAgent serves an agent over loopback TCP.
func benchAgent(b *testing.B) (string, *http.Client) {
	a := newBenchAgent(b)
	srv := httptest.NewServer(a)
	b.Cleanup(func() { a.Close(); srv.Close() })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return srv.URL, client
}

var pickBody = []byte(`{"service":"api"}`)

// roundTrip is one pick and its report, as a client of the agent does.
func roundTrip(url string, c *http.Client) error {
	resp, err := c.Post(url+"/v1/pick", "application/json", bytes.NewReader(pickBody))
	if err != nil {
		return err
	}
	var p agent.PickResponse
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil {
		return err
	}
	body, _ := json.Marshal(agent.ReportRequest{Token: p.Token, Outcome: "success", LatencyMS: 1.5})
	resp, err = c.Post(url+"/v1/report", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// BenchmarkPickReport: pick + report round trips on loopback, as fast as
// 8 concurrent clients go.
func BenchmarkPickReport(b *testing.B) {
	url, c := benchAgent(b)
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0))) // 8 clients on 1–8 procs
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := roundTrip(url, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPickReportPaced: 8 clients together send 2,000 pick + report
// round trips a second (b.N in all); it reports the round trip's p50,
// p99 and maximum.
func BenchmarkPickReportPaced(b *testing.B) {
	const clients, rate = 8, 2000
	url, c := benchAgent(b)
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			period := time.Second * clients / rate
			time.Sleep(period * time.Duration(i) / clients) // spread the clients over a period
			tick := time.NewTicker(period)
			defer tick.Stop()
			for n := i; n < b.N; n += clients {
				<-tick.C
				start := time.Now()
				if err := roundTrip(url, c); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	q := func(p int) float64 { return float64(all[(len(all)-1)*p/100].Microseconds()) }
	b.ReportMetric(q(50), "p50-µs")
	b.ReportMetric(q(99), "p99-µs")
	b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-µs")
}

// BenchmarkPickReportHandler: the agent's own share of a round trip —
// both handlers called in process, without HTTP on the wire.
func BenchmarkPickReportHandler(b *testing.B) {
	a := newBenchAgent(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			a.ServeHTTP(w, httptest.NewRequest("POST", "/v1/pick", bytes.NewReader(pickBody)))
			var p agent.PickResponse
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				b.Fatal(err)
			}
			body, _ := json.Marshal(agent.ReportRequest{Token: p.Token, Outcome: "success", LatencyMS: 1.5})
			w = httptest.NewRecorder()
			a.ServeHTTP(w, httptest.NewRequest("POST", "/v1/report", bytes.NewReader(body)))
			if w.Code != 204 {
				b.Fatal(w.Code)
			}
		}
	})
}
