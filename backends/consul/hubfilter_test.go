package consul

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The checks filter names exactly the watched services and their nodes,
// dots and all, and falls back to every check when it would not fit the
// agent's request line.
func TestChecksFilter(t *testing.T) {
	h := newHub(nil)
	for _, svc := range []string{"web", "a.b", "web", "x-1"} {
		h.subs[&stream{service: svc}] = struct{}{}
	}
	h.nodes = []string{"n.1", "n2"}
	f, nodes := h.checksFilter()
	if len(nodes) != 2 {
		t.Errorf("nodes = %q, want the hub's two", nodes)
	}
	svcRe, rest, ok := strings.Cut(strings.TrimPrefix(f, "ServiceName matches "), ` or (ServiceID == "" and Node matches `)
	if !ok {
		t.Fatalf("filter %q: want the services, then the nodes' own checks", f)
	}
	for _, c := range []struct {
		quoted string
		in     []string
		out    []string
	}{
		{svcRe, []string{"web", "a.b", "x-1"}, []string{"", "aXb", "web2", "xweb", "a.b.c"}},
		{strings.TrimSuffix(rest, ")"), []string{"n.1", "n2"}, []string{"nX1", "n", "n22"}},
	} {
		expr, err := strconv.Unquote(c.quoted)
		if err != nil {
			t.Fatalf("%s: %v", c.quoted, err)
		}
		re := regexp.MustCompile(expr)
		for _, s := range c.in {
			if !re.MatchString(s) {
				t.Errorf("%s does not match %q", expr, s)
			}
		}
		for _, s := range c.out {
			if re.MatchString(s) {
				t.Errorf("%s matches %q", expr, s)
			}
		}
	}

	for i := range 20000 {
		h.subs[&stream{service: fmt.Sprintf("service-number-%06d", i)}] = struct{}{}
	}
	if f, nodes := h.checksFilter(); f != "" || nodes != nil {
		t.Errorf("20,000 watched services: a filter of %d bytes, want none (every check)", len(f))
	}
	h.subs = map[*stream]struct{}{}
	if f, _ := h.checksFilter(); f != noChecks {
		t.Errorf("no watch: filter %q, want %q", f, noChecks)
	}
}
