package syncspec

// DefaultMaxBatch bounds the objects in one change of the stream: the
// server refuses a larger change unless it was configured otherwise, and
// an agent whose welcome names no bound (SyncWelcome.max_batch 0, a server
// of an earlier release) sends changes of at most this many.
const DefaultMaxBatch = 256
