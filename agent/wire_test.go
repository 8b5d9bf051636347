package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/roster-go/roster/registry"
)

// FuzzDecodePick: whatever the hand decoder accepts, encoding/json (the
// fallback, and the documented behaviour) accepts with the same result.
func FuzzDecodePick(f *testing.F) {
	for _, seed := range []string{
		`{"service":"api"}`, ` { "service" : "api" , "strategy":"p2c", "key":"user-1","version":"v1","zone":"hz-1" } ` + "\n",
		`{}`, `{"service":"api",}`, `{"service":"a\"pi"}`, `{"service":"ápi"}`, `{"Service":"api"}`,
		`{"service":"api"}{"service":"web"}`, `{"service":"api"} x`, `{"service":"api","service":"web"}`,
		`{"service":null}`, `{"service":1}`, `{"tags":["a"]}`, `{"bogus":"x"}`, `{"service":"a\u0001"}`, `{"service"`,
		`{"service":"api","endpoint":"grpc"}`, `{"endpoint":"g\"rpc"}`, `{"Endpoint":"grpc"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var slow pickRequest
		fast, ok := decodePick([]byte(body))
		if !ok {
			return
		}
		if err := decodeJSON([]byte(body), &slow); err != nil || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: hand decoded %+v, encoding/json %+v, %v", body, fast, slow, err)
		}
	})
}

// FuzzDecodeReport: as FuzzDecodePick, for reports.
func FuzzDecodeReport(f *testing.F) {
	for _, seed := range []string{
		`{"token":"5f0c1a2b-1","outcome":"success","latency_ms":1.5}`, `{"token":"x","outcome":"failure","latency_ms":0}`,
		`{"latency_ms":-0}`, `{"latency_ms":1e400}`, `{"latency_ms":01}`, `{"latency_ms":1.}`, `{"latency_ms":.5}`,
		`{"latency_ms":1e}`, `{"latency_ms":-}`, `{"latency_ms":2E+3}`, `{"latency_ms":"1"}`, `{"outcome":"great"}`,
		`{"token":"a","token":"b"}`, `{"Token":"a"}`, `{"latency_ms":1 }`, `{"latency_ms":1}garbage`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var slow reportRequest
		fast, ok := decodeReport([]byte(body))
		if !ok {
			return
		}
		err := decodeJSON([]byte(body), &slow)
		if err != nil || fast.Token != slow.Token || fast.Outcome != slow.Outcome ||
			math.Float64bits(fast.LatencyMS) != math.Float64bits(slow.LatencyMS) {
			t.Fatalf("%q: hand decoded %+v, encoding/json %+v, %v", body, fast, slow, err)
		}
	})
}

// FuzzAppendPick: the hand-written pick answer is byte for byte what
// json.Encoder writes.
func FuzzAppendPick(f *testing.F) {
	f.Add("a", "api", "10.0.0.1:80", "", "", uint32(0), "", "", "", false, uint64(1))
	f.Add("i-1", "api", "[::1]:80", "v1.2", "hz-1", uint32(100), "canary", "k", "v", true, uint64(math.MaxUint64))
	f.Add("<&>\"\\\b\f\n\r\t\x00\x1f\x7f", "é", "\u2028\u2029", "\xff\xfe", "日本", uint32(math.MaxUint32), "\xed\xa0\x80", "a<b", "\u00a0", false, uint64(36))
	f.Fuzz(func(t *testing.T, id, service, address, version, zone string, weight uint32, tag, mk, mv string, stale bool, seq uint64) {
		in := registry.Instance{ID: id, Service: service, Address: address, Version: version, Zone: zone, Weight: weight}
		if tag != "" {
			in.Tags = []string{tag, "z" + tag}
			// Endpoints of hostile strings too: names and protocols
			// are validated on registration, not on the way out.
			in.Endpoints = []registry.Endpoint{{Name: tag, Address: address}, {Name: mk, Address: mv, Protocol: tag}}
		}
		if mk != "" {
			in.Metadata = map[string]string{mk: mv, "m" + mk: mv + mv}
		}
		checkAppendPick(t, in, stale, seq)
	})
}

func checkAppendPick(t *testing.T, in registry.Instance, stale bool, seq uint64) {
	t.Helper()
	tok := tokenID{seq: seq, key: [keyLen]byte{0xff, 1, 0xa0}}
	e, _ := in.Endpoint("")
	if len(in.Endpoints) > 0 {
		e = in.Endpoints[len(in.Endpoints)-1]
	}
	var want bytes.Buffer
	if err := json.NewEncoder(&want).Encode(pickResponse{Token: tok.String(), Instance: in, Endpoint: e, Stale: stale}); err != nil {
		t.Fatal(err)
	}
	if got := appendPick(nil, tok, &in, e, stale); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%+v:\n got %s\nwant %s", in, got, want.Bytes())
	}
}

// TestAppendPickLargeMetadata: past the 16 keys sorted on the stack.
func TestAppendPickLargeMetadata(t *testing.T) {
	in := registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Tags: []string{}, Metadata: map[string]string{}}
	checkAppendPick(t, in, false, 1)
	for i := range 40 {
		in.Metadata[fmt.Sprintf("key-%d", 40-i)] = strings.Repeat("v", i)
	}
	checkAppendPick(t, in, true, 12345)
}

// TestTokenSpelling: a token is accepted only as the agent spells it.
func TestTokenSpelling(t *testing.T) {
	key := [keyLen]byte{0, 1, 0x9a, 0xff, 5, 6, 7, 8, 9, 10, 11, 0xbc}
	for _, seq := range []uint64{1, 35, 36, math.MaxUint64} {
		id := tokenID{seq: seq, key: key}
		if got, ok := parseToken(id.String()); !ok || got != id {
			t.Errorf("token %q of %+v reads as %+v, %v", id.String(), id, got, ok)
		}
	}
	k := "-00019aff05060708090a0bbc"
	for _, bad := range []string{"", k, "0" + k, "01" + k, "A" + k, "a_b" + k, "+1" + k, "-1" + k, "3w5e11264sgsg" + k,
		strings.ToUpper("a" + k), "1", "1-", "1" + k[:len(k)-1], "1" + k + "0", "1" + k[:len(k)-1] + "g", "1-" + strings.Repeat("0", 2*keyLen) + "-"} {
		if id, ok := parseToken(bad); ok {
			t.Errorf("token %q read as %+v", bad, id)
		}
	}
}
