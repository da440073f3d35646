package lease

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	err := Classify(status.Error(codes.Internal, "store error: WRONGTYPE"))
	var rej *Rejection
	if !errors.Is(err, ErrRejected) || !errors.As(err, &rej) || rej.Request != -1 {
		t.Fatalf("Classify(Internal) = %v, want a rejection of the whole call", err)
	}
	if err := Classify(status.Error(codes.Unavailable, "down")); errors.Is(err, ErrRejected) {
		t.Fatal("an outage was taken for a refusal")
	}
}
