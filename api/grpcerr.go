package api

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ToStatus turns an error into a gRPC status error whose message a user can
// act on. Errors that already carry a status (forwarded from another host)
// pass through unchanged.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrLocked), errors.Is(err, ErrChanged):
		code = codes.Aborted
	case errors.Is(err, ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrConflict):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, ErrForbidden):
		code = codes.PermissionDenied
	case errors.Is(err, ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

// FromStatus turns a gRPC status error from another host back into an
// error that matches this package's sentinels (errors.Is) and still carries
// its status for ToStatus.
func FromStatus(err error) error {
	s, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	var sentinel error
	switch s.Code() {
	case codes.Aborted:
		sentinel = ErrLocked
		if strings.Contains(s.Message(), ErrChanged.Error()) {
			sentinel = ErrChanged
		}
	case codes.AlreadyExists:
		sentinel = ErrExists
	case codes.NotFound:
		sentinel = ErrNotFound
	case codes.FailedPrecondition:
		sentinel = ErrConflict
	case codes.InvalidArgument:
		sentinel = ErrInvalid
	case codes.PermissionDenied:
		sentinel = ErrForbidden
	case codes.Unavailable:
		sentinel = ErrUnavailable
	default:
		return err
	}
	return &statusError{st: s, sentinel: sentinel}
}

type statusError struct {
	st       *status.Status
	sentinel error
}

func (e *statusError) Error() string              { return e.st.Message() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
func (e *statusError) Is(target error) bool       { return target == e.sentinel }
