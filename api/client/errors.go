package client

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorLine renders err as one line for a user: the message of a gRPC
// status without the "rpc error: code = ..." prefix, any context wrapped
// around it kept in front, and the servers tried when none answered.
func ErrorLine(err error) string {
	if err == nil {
		return ""
	}
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return oneLine(prefixOf(err, ue) + describeUnreachable(ue))
	}
	var se interface {
		error
		GRPCStatus() *status.Status
	}
	if errors.As(err, &se) {
		if st := se.GRPCStatus(); st != nil {
			return oneLine(prefixOf(err, se) + describe(st))
		}
	}
	return oneLine(err.Error())
}

// prefixOf returns the context that err adds in front of inner's message.
func prefixOf(err, inner error) string {
	if p, ok := strings.CutSuffix(err.Error(), inner.Error()); ok {
		return p
	}
	return ""
}

func describeUnreachable(e *UnreachableError) string {
	where := strings.Join(e.Servers, ", ")
	if status.Code(e.Err) == codes.DeadlineExceeded {
		return "no answer from a teapot-lb server at " + where + " in time: " + cause(e.Err) + " (raise --timeout if the cluster is busy)"
	}
	return "no teapot-lb server reachable at " + where + ": " + cause(e.Err)
}

func describe(st *status.Status) string {
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		return "no teapot-lb server reachable: " + cause(st.Err())
	case codes.Unimplemented:
		return "the server does not support this request (is it an older teapot-lb?): " + msg
	case codes.Unauthenticated, codes.PermissionDenied:
		if msg == "" {
			return "the server refused the admin credentials"
		}
	case codes.DeadlineExceeded:
		if msg == "" || msg == "context deadline exceeded" {
			return "the server did not answer in time (raise --timeout if the cluster is busy)"
		}
	}
	if msg == "" {
		return st.Code().String()
	}
	return msg
}

// cause strips the transport's wrapping off a connection failure:
// `connection error: desc = "transport: Error while dialing: dial tcp
// 127.0.0.1:1: connect: connection refused"` becomes `dial tcp 127.0.0.1:1:
// connect: connection refused`.
func cause(err error) string {
	msg := status.Convert(err).Message()
	// gRPC's retry layer wraps the last attempt's status in its own text.
	if i := strings.LastIndex(msg, "desc = "); strings.HasPrefix(msg, "max retries exhausted") && i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	for _, p := range []string{"last connection error: ", "connection error: desc = ", `"`, "transport: ", "Error while dialing: ", "error while dialing: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	msg = strings.TrimSuffix(msg, `"`)
	if msg == "" {
		return "no connection"
	}
	return msg
}
