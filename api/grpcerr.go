package api

import (
	"context"
	"errors"

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
