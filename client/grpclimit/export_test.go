package grpclimit

import (
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/internal/clock"
)

// RetryUnaryOn is RetryUnary on a test's clock and randomness.
func RetryUnaryOn(opts RetryOptions, clk clock.Clock, random func() float64) grpc.UnaryClientInterceptor {
	return retryUnary(opts, clk, random)
}
