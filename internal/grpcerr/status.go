// Package grpcerr builds the gRPC statuses Allot answers with: a code and a
// message for people, and google.rpc error details for programs.
package grpcerr

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// New is the error of a status with code, msg and details (RetryInfo,
// QuotaFailure, BadRequest, ...). The details are dropped, and the status
// kept, only where gRPC refuses them: for codes.OK, whose status is no
// error.
func New(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	with, err := st.WithDetails(details...)
	if err != nil {
		return st.Err()
	}
	return with.Err()
}

// Invalid is the InvalidArgument status of a bad field, "field: message",
// with the field also in a BadRequest field violation, so that a program
// need not parse the message to find it.
func Invalid(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return New(codes.InvalidArgument, field+": "+msg, &errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}},
	})
}
