package policy_test

import (
	"errors"
	"fmt"

	"github.com/roster-go/roster/policy"
)

// A policy says what it changes; Parse names the field of a mistake.
func ExampleParse() {
	p, err := policy.Parse([]byte(`{"strategy": "consistent_hash", "hash_key": "X-User-ID",
		"split": [{"version": "v2", "percent": 5}], "retry": {"attempts": 2, "idempotent": false}}`))
	fmt.Println(p.Strategy, p.Split[0].Percent, err)

	_, err = policy.Parse([]byte(`{"split": [{"version": "v1", "percent": 60}, {"version": "v2", "percent": 50}]}`))
	var fe *policy.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field)
	}
	fmt.Println(err)
	// Output:
	// consistent_hash 5 <nil>
	// split[1].percent
	// policy: split[1].percent: the split's percents add up to 110, over 100
}

// Marshal writes only what the policy sets.
func ExampleMarshal() {
	b, _ := policy.Marshal(policy.Policy{Strategy: "round_robin", Timeout: policy.Duration(1500e6)})
	fmt.Println(string(b))
	// Output: {"strategy":"round_robin","timeout":"1.5s"}
}
