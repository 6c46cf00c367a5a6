//go:build race

package tenantbgp

const raceEnabled = true
