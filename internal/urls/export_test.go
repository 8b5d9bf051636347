package urls

// AddPublicOptions declares options public as a backend's Register would,
// without adding a scheme (Example output lists schemes).
func AddPublicOptions(names ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, n := range names {
		public[n] = true
	}
}
