//go:build race

package chaos

// raceEnabled: this binary runs under the race detector.
const raceEnabled = true
