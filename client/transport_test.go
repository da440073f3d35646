package client

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/lease"
)

// A refusal that names a request isolates that request; one that names
// none backs the whole call off.
func TestRejectedRequest(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{status.Error(codes.InvalidArgument, "requests[3].key: is 600 bytes, at most 512"), 3},
		{status.Error(codes.NotFound, `requests[12].rule: unknown rule "gone"`), 12},
		{status.Error(codes.FailedPrecondition, `requests[0].rule: rule "log" is strict`), 0},
		{status.Error(codes.Internal, "store error: WRONGTYPE"), -1},
		{status.Error(codes.InvalidArgument, "node_id: is required"), -1},
		{status.Error(codes.InvalidArgument, "requests[x].key: nonsense"), -1},
	} {
		if got := rejectedRequest(tc.err); got != tc.want {
			t.Errorf("rejectedRequest(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	c := &Client{refresh: make(chan struct{}, 1)}
	err := c.classify(status.Error(codes.Internal, "store error: WRONGTYPE"))
	var rej *lease.Rejection
	if !errors.Is(err, lease.ErrRejected) || !errors.As(err, &rej) || rej.Request != -1 {
		t.Fatalf("classify(Internal) = %v, want a rejection of the whole call", err)
	}
	if isUnreachable(err) {
		t.Fatal("a refusal was taken for an outage")
	}
}
