package driver

// AddPublicOptions declares options public as a backend's RegisterDriver
// would, without registering a scheme (Example output lists schemes).
func AddPublicOptions(names ...string) {
	openersMu.Lock()
	defer openersMu.Unlock()
	for _, n := range names {
		public[n] = true
	}
}
