package rosterhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	tracenoop "go.opentelemetry.io/otel/trace/noop"

	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// BenchmarkCallPath measures one GET on loopback, round trip and body
// read included, through rosterhttp.Transport (round robin over three
// instances of a mem:// registry) and through a plain http.Transport
// that cycles over the same three servers' URLs, in the same run.
// Compare with `benchstat -col /impl`:
//
//	go test -run '^$' -bench CallPath -benchmem -count 6 ./contrib/rosterhttp
//
// Both send every attempt through an http.Transport of the same
// settings, so the difference is what Roster adds: the URL check, the
// middleware.Client chain (pick, retry, quarantine, Done) and the
// request's copy with the instance's address. impl=roster-nospans is
// impl=roster with middleware.WithTracerProvider(noop): spans off.
func BenchmarkCallPath(b *testing.B) {
	const n = 3
	reg, err := registry.Open(context.Background(), "mem://")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { reg.Close() })
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	var urls []string
	for range n {
		srv := httptest.NewServer(ok)
		b.Cleanup(srv.Close)
		if _, err := reg.Register(context.Background(), registry.Instance{Service: "users", Address: srv.Listener.Addr().String()}); err != nil {
			b.Fatal(err)
		}
		urls = append(urls, srv.URL+"/v1/users/42")
	}
	mc, err := middleware.NewClient(reg, middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mc.Close() })
	newBase := func() *http.Transport {
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		b.Cleanup(tr.CloseIdleConnections)
		return tr
	}
	// The same chain with spans off: without an OpenTelemetry SDK the
	// global tracer's no-op span still allocates.
	quiet, err := middleware.NewClient(reg, middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)),
		middleware.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { quiet.Close() })
	plain := &http.Client{Transport: newBase()}
	roster := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: newBase()}}
	rosterQuiet := &http.Client{Transport: &rosterhttp.Transport{Client: quiet, Base: newBase()}}
	impls := []struct {
		name string
		hc   *http.Client
		url  func(i int) string
	}{
		{"plain", plain, func(i int) string { return urls[i%n] }},
		{"roster", roster, func(int) string { return "http://users/v1/users/42" }},
		{"roster-nospans", rosterQuiet, func(int) string { return "http://users/v1/users/42" }},
	}
	get := func(hc *http.Client, url string) error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	for _, im := range impls {
		for i := range 2 * n {
			if err := get(im.hc, im.url(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, im := range impls {
				b.Run("impl="+im.name, func(b *testing.B) {
					b.ReportAllocs()
					defer benchReportCPU(b, benchCPUTime())
					if mode == "serial" {
						i := 0
						for b.Loop() {
							if err := get(im.hc, im.url(i)); err != nil {
								b.Fatal(err)
							}
							i++
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						i := 0
						for pb.Next() {
							if err := get(im.hc, im.url(i)); err != nil {
								b.Error(err)
								return
							}
							i++
						}
					})
				})
			}
		})
	}
}

// benchCPUTime is the process's user + system CPU time. Per call it counts
// client and server alike, and unlike ns/op it does not grow with the
// time other processes take the CPUs from this one.
func benchCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchReportCPU reports the CPU time per call since start as cpu-ns/op.
func benchReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(benchCPUTime()-start)/float64(b.N), "cpu-ns/op")
}
