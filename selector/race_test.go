//go:build race

package selector

const raceEnabled = true
