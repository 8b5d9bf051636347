package driver

import "testing"

func TestSnapshotFindAndClone(t *testing.T) {
	in := []Instance{{ID: "a", Metadata: map[string]string{"k": "v"}, Tags: []string{"t"}}, {ID: "b"}, {ID: "c"}}
	s := Snapshot{Instances: in}
	if got, ok := s.Find("b"); !ok || got.ID != "b" {
		t.Errorf("Find(b) = %v %v", got, ok)
	}
	if _, ok := s.Find("zz"); ok {
		t.Error("Find(zz) found something")
	}
	c := in[0].Clone()
	c.Metadata["k"] = "changed"
	c.Tags[0] = "changed"
	if in[0].Metadata["k"] != "v" || in[0].Tags[0] != "t" {
		t.Error("Clone shares maps or slices with the original")
	}
	if !in[0].Equal(in[0].Clone()) {
		t.Error("an instance is not Equal to its clone")
	}
}
