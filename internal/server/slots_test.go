package server_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
)

// Slots over the wire: a concurrency rule's leases carry absolute slots
// and a share, a release gives them all back, and what a slot request
// cannot mean is refused, naming the field.
func TestSlotsOverGRPC(t *testing.T) {
	set, err := rules.Parse("test", []byte("rules:\n  - name: cc\n    algorithm: concurrency\n    limit: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := serveWith(t, server.Config{Store: memory(t), Rules: set})
	take := func(node string, want, kept int64) *allotv1.Lease {
		t.Helper()
		resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: node, Requests: []*allotv1.LeaseRequest{
			{Rule: "cc", Key: "k", Want: want, SlotsKept: &kept}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLeases()[0]
	}
	if l := take("a", 3, 0); l.GetGranted() != 3 || l.GetSlotShare() != 3 || l.GetTtl().AsDuration() != set.Rules()[0].Lease.TTL {
		t.Fatalf("a: %v", l)
	}
	if l := take("b", 4, 0); l.GetGranted() != 1 || l.GetSlotShare() != 2 || l.GetHolders() != 2 {
		t.Fatalf("b: %v, want the 1 left, a share of 2, 2 holders", l)
	}
	if _, err := api.Release(ctx(t), &allotv1.ReleaseRequest{NodeId: "a", Returns: []*allotv1.Return{{Rule: "cc", Key: "k"}}}); err != nil {
		t.Fatal(err)
	}
	if l := take("b", 4, 1); l.GetGranted() != 4 {
		t.Fatalf("b after a released: %v", l)
	}
	neg := int64(-1)
	for _, c := range []struct {
		req   *allotv1.LeaseRequest
		code  codes.Code
		field string
	}{
		{&allotv1.LeaseRequest{Rule: "cc", Key: "k", Want: 1, Consumed: 2}, codes.FailedPrecondition, "requests[0].rule"},
		{&allotv1.LeaseRequest{Rule: "cc", Key: "k", Want: -1}, codes.InvalidArgument, "requests[0].want"},
		{&allotv1.LeaseRequest{Rule: "cc", Key: "k", SlotsKept: &neg}, codes.InvalidArgument, "requests[0].slots_kept"},
		{&allotv1.LeaseRequest{Rule: "cc", Key: ""}, codes.InvalidArgument, "requests[0].key"},
	} {
		_, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "a", Requests: []*allotv1.LeaseRequest{c.req}})
		wantStatus(t, err, c.code, c.field)
	}
	_, err = api.Check(ctx(t), &allotv1.CheckRequest{Rule: "cc", Key: "k"})
	wantStatus(t, err, codes.FailedPrecondition, "rule")
}
