package kubernetes_test

import (
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/backend"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/roster-go/roster/backends/kubernetes"
)

// labelValue is what the apiserver takes as a service name: a non-empty
// label value (the kubernetes.io/service-name label), in lower case as
// Roster's names are.
func labelValue(s string) bool {
	return s != "" && s == strings.ToLower(s) && len(validation.IsValidLabelValue(s)) == 0
}

// TestServiceNamesAreLabelValues: a name is a valid service name exactly
// when it is a lower-case label value, so no name valid on another backend
// can fail here at run time. Every name of up to 4 characters over an
// alphabet of each class is tried, and long ones around the limit.
func TestServiceNamesAreLabelValues(t *testing.T) {
	const alphabet = "a0.-_A/ä"
	names := []string{""}
	for n := 0; n < 4; n++ {
		for _, p := range names {
			if len(p) < n {
				continue
			}
			for _, c := range alphabet {
				names = append(names, p+string(c))
			}
		}
	}
	for _, l := range []int{62, 63, 64, 65, 128} {
		for _, end := range []string{"a", "9", "-", ".", "_"} {
			names = append(names, strings.Repeat("a", l-1)+end, "0"+strings.Repeat("-", l-2)+end)
		}
	}
	for _, n := range names {
		if valid, label := backend.ValidateService(n) == nil, labelValue(n); valid != label {
			t.Errorf("service %q: valid %v, label value %v", n, valid, label)
		}
	}
}

// TestObjectNamesAreValid: the Lease and slice of any registration have a
// valid object name, whatever the service and ID (at their limits).
func TestObjectNamesAreValid(t *testing.T) {
	svc, id := strings.Repeat("s", backend.MaxServiceLen), strings.Repeat("I.", backend.MaxIDLen/2)
	for _, name := range []string{kubernetes.ObjectName(svc, id), kubernetes.ObjectName("a", "b")} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > validation.DNS1123LabelMaxLength {
			t.Errorf("object name %q: %v", name, errs)
		}
	}
}
