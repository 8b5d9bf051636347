package backend

import (
	"strings"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// TestFieldErrorsHideURLSecrets: a registry URL typed where a service
// name, address or ID belongs ("roster ls redis://:pw@h", the --registry
// flag forgotten) is refused without printing its password, whatever the
// URL's typos.
func TestFieldErrorsHideURLSecrets(t *testing.T) {
	for _, in := range []string{
		"redis://:hunter2@127.0.0.1:6379", "redis:/:hunter2@127.0.0.1:6379", "etcd://root:hunter2@h:2379",
		"consul://h:8500?token=hunter2", "user:hunter2@h:80", "zk://u:hunter2@h1,h2/roster",
	} {
		errs := []error{ValidateService(in), ValidateAddress(in), validateID(in),
			ValidateInstance(driver.Instance{Service: "s", ID: "i", Address: "h:1", Metadata: map[string]string{"k": in + "\x1b"}})}
		if _, err := CanonicalAddress(in); err != nil {
			errs = append(errs, err)
		}
		for _, err := range errs {
			if err == nil {
				t.Errorf("%q accepted", in)
			} else if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%q: error prints the secret: %v", in, err)
			}
		}
	}
	if err := ValidateService("svc@1"); err == nil || !strings.Contains(err.Error(), `"svc@1"`) {
		t.Errorf("a name with '@' and no credentials: %v, want it quoted as typed", err)
	}
}
