//go:build !race

package l7

// raceEnabled is set when the tests run under the race detector.
const raceEnabled = false
