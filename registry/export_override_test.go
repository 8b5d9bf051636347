package registry

// ApplyOverrides exposes applyOverrides to the allocation test.
func ApplyOverrides(s Snapshot, ovs []Override) Snapshot { return applyOverrides(s, ovs) }
