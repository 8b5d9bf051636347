package backend

import (
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry/driver"
)

// Between records claiming one ID, standing decides, never the order
// the backend lists them in; a conflict is logged once, naming the
// service, the ID and both addresses.
func TestResolveDuplicates(t *testing.T) {
	log := logbuf.Default(t)
	conflicts = conflictLog{}

	real := driver.Instance{ID: "api-1", Service: "api", Address: "10.0.0.1:80", Weight: 100}
	fake := driver.Instance{ID: "api-1", Service: "api", Address: "10.6.6.6:80", Weight: 65535}
	other := driver.Instance{ID: "api-2", Service: "api", Address: "10.0.0.2:80", Weight: 100}
	for _, c := range []struct {
		name  string
		cands []Candidate
		want  string
	}{
		{"live beats foreign listed first", []Candidate{{fake, 0}, {real, Live | Own}, {other, Live | Own}}, real.Address},
		{"live beats own", []Candidate{{fake, Own}, {real, Live}, {other, 0}}, real.Address},
		{"own beats foreign", []Candidate{{fake, 0}, {real, Own}, {other, 0}}, real.Address},
		{"live and own beat live", []Candidate{{fake, Live}, {real, Live | Own}, {other, 0}}, real.Address},
		{"the higher wins listed last too", []Candidate{{real, Live | Own}, {other, 0}, {fake, Live}}, real.Address},
		{"equals: the first", []Candidate{{fake, Own}, {real, Own}, {other, 0}}, fake.Address},
	} {
		for n := 0; n < 3; n++ { // reads repeat: the log does not
			got := Resolve("api", c.cands)
			if len(got) != 2 || got[0].ID != "api-1" || got[0].Address != c.want || got[1].ID != "api-2" {
				t.Errorf("%s: Resolve = %+v, want api-1 at %s then api-2", c.name, got, c.want)
			}
		}
	}
	// Six cases, two pairs of addresses (which one is served): two lines.
	if n := strings.Count(log.String(), "two records claim one instance ID"); n != 2 {
		t.Errorf("%d warnings, want 2 (one per conflict): %s", n, log.String())
	}
	for _, w := range []string{"service=api", "id=api-1", "10.6.6.6:80", "10.0.0.1:80"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("warning lacks %q: %s", w, log.String())
		}
	}
	// One record twice (a Pod in two slices) is no conflict.
	before := log.String()
	if got := Resolve("api", []Candidate{{real, 0}, {real, 0}}); len(got) != 1 || log.String() != before {
		t.Errorf("a record twice: %+v, log %q", got, log.String())
	}
}
