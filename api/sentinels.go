package api

import "errors"

// Errors a store returns that the API edge turns into gRPC codes.
var (
	// ErrExists: an object to create exists already.
	ErrExists = errors.New("already exists")
	// ErrUnavailable: no leader could be reached in time; retrying may help.
	ErrUnavailable = errors.New("cluster unavailable")
	// ErrForbidden: the caller may not do this.
	ErrForbidden = errors.New("forbidden")
	// ErrLocked: a lock is held by another owner.
	ErrLocked = errors.New("locked")
	// ErrChanged: an object changed since the writer read it (a revision
	// precondition failed); nothing was written.
	ErrChanged = errors.New("changed since it was read")
)
