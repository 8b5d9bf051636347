package agent

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/roster-go/roster/registry"
)

// The pick and report requests are the agent's hot path: every call a
// client makes is one of each. They are read into a pooled buffer and
// decoded by hand when they have the common shape (plain ASCII strings
// without escapes, a number for latency_ms); anything else goes through
// encoding/json with the same result, which the fuzz tests check. The
// pick answer is appended to the same buffer by hand, byte for byte what
// encoding/json writes. This takes the allocations of the agent's
// handlers per round trip from about 33 to 10, and middleware's cached
// telemetry attributes to 2 (TestPickReportAllocations;
// docs/benchmarks.md#agent).

// bodyPool holds the buffers of request bodies and answers.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooled bounds the buffers put back in bodyPool: a rare large body
// is left to the collector rather than kept.
const maxPooled = 16 << 10

func getBuf() *[]byte { return bodyPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooled {
		*b = (*b)[:0]
		bodyPool.Put(b)
	}
}

// readBody appends the first maxBody bytes of body to buf.
func readBody(body io.Reader, buf []byte) ([]byte, error) {
	for len(buf) < maxBody {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf)+512, maxBody-len(buf)))
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), maxBody)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, fmt.Errorf("%w: request body: %v", registry.ErrInvalid, err)
		}
	}
	return buf, nil
}

// Header values shared by every answer: net/http only reads them, and
// with len = cap = 1 a Header.Add copies rather than writes into them.
var (
	contentTypeJSON = []string{"application/json"}
	cacheNoStore    = []string{"no-store"}
)

// writeBody writes a JSON answer already encoded in body.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	setJSONHeaders(w)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
}

// scanner reads the members of a JSON object of the common shape; any
// other input makes it fail, and its caller fall back to encoding/json.
type scanner struct {
	b []byte
	i int
}

// next skips white space and consumes c if it comes next.
func (s *scanner) next(c byte) bool {
	s.space()
	return s.opt(c)
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

func (s *scanner) space() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// str reads a string of printable ASCII without escapes.
func (s *scanner) str() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c == '\\' || c >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

// num reads a number as JSON spells it.
func (s *scanner) num() ([]byte, bool) {
	s.space()
	start := s.i
	s.opt('-')
	if !s.opt('0') && !s.digits() {
		return nil, false
	}
	if s.opt('.') && !s.digits() {
		return nil, false
	}
	if s.opt('e') || s.opt('E') {
		_ = s.opt('+') || s.opt('-')
		if !s.digits() {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}

func (s *scanner) opt(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// members calls member for each key of the object that b holds, with the
// scanner before the key's value; member reads the value. It fails if b
// is not one object with nothing but white space after it, or if member
// fails.
func (s *scanner) members(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return s.end()
	}
	for {
		key, ok := s.str()
		if !ok || !s.next(':') || !member(key) {
			return false
		}
		if !s.next(',') {
			return s.next('}') && s.end()
		}
	}
}

// decodePick decodes a pick request of the common shape: string members
// only, tags excepted.
func decodePick(b []byte) (pickRequest, bool) {
	var req pickRequest
	s := scanner{b: b}
	ok := s.members(func(key []byte) bool {
		var dst *string
		switch string(key) {
		case "service":
			dst = &req.Service
		case "strategy":
			dst = &req.Strategy
		case "key":
			dst = &req.Key
		case "version":
			dst = &req.Version
		case "zone":
			dst = &req.Zone
		case "endpoint":
			dst = &req.Endpoint
		default:
			return false
		}
		v, ok := s.str()
		*dst = string(v)
		return ok
	})
	return req, ok
}

// decodeReport decodes a report request of the common shape.
func decodeReport(b []byte) (reportRequest, bool) {
	var req reportRequest
	s := scanner{b: b}
	ok := s.members(func(key []byte) bool {
		switch string(key) {
		case "token":
			v, ok := s.str()
			req.Token = string(v)
			return ok
		case "outcome":
			v, ok := s.str()
			req.Outcome = outcomeName(v)
			return ok
		case "latency_ms":
			v, ok := s.num()
			if !ok {
				return false
			}
			f, err := strconv.ParseFloat(string(v), 64)
			req.LatencyMS = f
			return err == nil
		}
		return false
	})
	return req, ok
}

// outcomeName returns the outcome v names, without allocating for the
// known ones.
func outcomeName(v []byte) string {
	for name := range outcomes {
		if string(v) == name {
			return name
		}
	}
	return string(v)
}

// appendPick appends the JSON of a pick answer, with the newline of
// json.Encoder.
func appendPick(b []byte, id tokenID, in *registry.Instance, e registry.Endpoint, stale bool) []byte {
	b = append(b, `{"token":"`...)
	b = appendToken(b, id)
	b = append(b, `","instance":`...)
	b = appendInstance(b, in)
	b = append(b, `,"endpoint":`...)
	b = appendEndpoint(b, &e)
	b = append(b, `,"stale":`...)
	b = strconv.AppendBool(b, stale)
	return append(b, "}\n"...)
}

// appendInstance appends in as encoding/json does.
func appendInstance(b []byte, in *registry.Instance) []byte {
	b = appendMember(b, '{', "id", in.ID)
	b = appendMember(b, ',', "service", in.Service)
	b = appendMember(b, ',', "address", in.Address)
	if in.Version != "" {
		b = appendMember(b, ',', "version", in.Version)
	}
	if in.Zone != "" {
		b = appendMember(b, ',', "zone", in.Zone)
	}
	if in.Region != "" {
		b = appendMember(b, ',', "region", in.Region)
	}
	b = append(b, `,"weight":`...)
	b = strconv.AppendUint(b, uint64(in.Weight), 10)
	if len(in.Tags) > 0 {
		b = append(b, `,"tags":`...)
		sep := byte('[')
		for _, t := range in.Tags {
			b = appendString(append(b, sep), t)
			sep = ','
		}
		b = append(b, ']')
	}
	if len(in.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		b = appendMap(b, in.Metadata)
	}
	if len(in.Endpoints) > 0 {
		b = append(b, `,"endpoints":`...)
		sep := byte('[')
		for n := range in.Endpoints {
			b = appendEndpoint(append(b, sep), &in.Endpoints[n])
			sep = ','
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendEndpoint appends e as encoding/json does.
func appendEndpoint(b []byte, e *registry.Endpoint) []byte {
	b = appendMember(b, '{', "name", e.Name)
	b = appendMember(b, ',', "address", e.Address)
	if e.Protocol != "" {
		b = appendMember(b, ',', "protocol", e.Protocol)
	}
	return append(b, '}')
}

// appendMember appends sep, then "key":value.
func appendMember(b []byte, sep byte, key, value string) []byte {
	b = append(b, sep, '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendString(b, value)
}

// appendMap appends m with its keys sorted, as encoding/json does.
func appendMap(b []byte, m map[string]string) []byte {
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	sep := byte('{')
	for _, k := range keys {
		b = appendString(append(b, sep), k)
		b = appendString(append(b, ':'), m[k])
		sep = ','
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does
// (HTML escaping on): <, >, & and control characters as \u00XX (\b, \f,
// \n, \r, \t short), invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
