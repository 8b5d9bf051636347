//go:build !race

// The race detector allocates, so the allocation tests of the hot path
// are built without it: go test -run 'Allocat' ./agent.

package agent

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// TestWireDoesNotAllocate: the pick answer is appended without
// allocating, and decoding a request allocates its strings only.
func TestWireDoesNotAllocate(t *testing.T) {
	tok := tokenID{seq: 12345, key: [keyLen]byte{1, 2, 3}}
	in := registry.Instance{ID: "i-1", Service: "api", Address: "10.0.0.1:80", Version: "v1", Tags: []string{"a"},
		Metadata:  map[string]string{"b": "2", "a": "1"},
		Endpoints: []registry.Endpoint{{Name: "http", Address: "10.0.0.1:80"}, {Name: "grpc", Address: "10.0.0.1:90", Protocol: "grpc"}}}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(1000, func() { buf = appendPick(buf[:0], tok, &in, in.Endpoints[1], false) }); n != 0 {
		t.Errorf("appendPick allocates %.1f times, want 0", n)
	}
	pick := []byte(`{"service":"api","strategy":"p2c"}`)
	if n := testing.AllocsPerRun(1000, func() { decodePick(pick) }); n != 2 {
		t.Errorf("decodePick allocates %.1f times, want 2 (its strings)", n)
	}
	report := []byte(`{"token":"1-0102030405060708090a0b0c","outcome":"success","latency_ms":1.5}`)
	if n := testing.AllocsPerRun(1000, func() { decodeReport(report) }); n != 1 {
		t.Errorf("decodeReport allocates %.1f times, want 1 (the token)", n)
	}
}

// TestPickReportAllocations pins the allocations of a pick and its
// report in the agent's handlers (net/http's own, such as the request
// and its header maps, are outside): the service and token strings.
// middleware.Client's OpenTelemetry attributes (cache read and pick) are
// built once per service and instance, not per call.
func TestPickReportAllocations(t *testing.T) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(t.Context(), registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	a, err := New(Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var w recorder
	pickBody, reportBody := bytes.NewReader(nil), bytes.NewReader(nil)
	pick, _ := http.NewRequest("POST", "/v1/pick", io.NopCloser(pickBody))
	report, _ := http.NewRequest("POST", "/v1/report", io.NopCloser(reportBody))
	var token []byte
	pickJSON := []byte(`{"service":"api"}`)
	roundTrip := func() {
		pickBody.Reset(pickJSON)
		w.reset()
		a.handlePick(&w, pick)
		_, tok, _ := bytes.Cut(w.body, []byte(`"token":"`))
		tok, _, _ = bytes.Cut(tok, []byte(`"`))
		token = append(append(append(token[:0], `{"token":"`...), tok...), `","outcome":"success","latency_ms":1.5}`...)
		reportBody.Reset(token)
		w.reset()
		a.handleReport(&w, report)
		if w.status != http.StatusNoContent {
			t.Fatalf("report: %d %s", w.status, w.body)
		}
	}
	roundTrip() // follows the service
	if n := testing.AllocsPerRun(1000, roundTrip); n > 2 {
		t.Errorf("a pick and its report allocate %.1f times in the agent, want at most 2", n)
	}
}

// recorder is an http.ResponseWriter that reuses its buffers.
type recorder struct {
	h      http.Header
	status int
	body   []byte
}

func (w *recorder) reset() {
	if w.h == nil {
		w.h = http.Header{}
	}
	clear(w.h)
	w.status, w.body = 0, w.body[:0]
}
func (w *recorder) Header() http.Header         { return w.h }
func (w *recorder) WriteHeader(status int)      { w.status = status }
func (w *recorder) Write(b []byte) (int, error) { w.body = append(w.body, b...); return len(b), nil }
