package l7

import "time"

// The engine reads the clock a few times per request, so it reads it
// cheaply: nowNano is one monotonic reading (time.Now takes a wall and a
// monotonic one) in Unix nanoseconds counted from the wall time at
// start. Every UnixNano value of the engine (deadlines, idle times,
// token buckets) comes from it, so they all follow one clock, which wall
// clock steps do not move.
var (
	clockBase     = time.Now()
	clockBaseUnix = clockBase.UnixNano()
)

// nowNano returns the current time in Unix nanoseconds.
func nowNano() int64 { return clockBaseUnix + int64(time.Since(clockBase)) }

// timeAt returns the time of a nowNano value. It carries a monotonic
// reading, so a deadline set with it is measured on the same clock.
func timeAt(ns int64) time.Time { return clockBase.Add(time.Duration(ns - clockBaseUnix)) }
