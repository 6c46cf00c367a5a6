//go:build !race

package scenarios

// raceEnabled reports whether the tests run with the race detector.
const raceEnabled = false
