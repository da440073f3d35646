package grpclimit_test

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/allot-dev/allot/client/grpclimit"
)

// The README's snippet of the retrying interceptor, as compiled code
// (internal/readme checks that it is here).
func readmeRetryUnary(addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithUnaryInterceptor(grpclimit.RetryUnary(grpclimit.RetryOptions{})),
		grpc.WithTransportCredentials(creds))
	return conn, err
}

var _ = readmeRetryUnary
