package server_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/server"
)

func keyBatch(prefix string, n int) []*allotv1.LeaseRequest {
	out := make([]*allotv1.LeaseRequest, n)
	for i := range out {
		out[i] = &allotv1.LeaseRequest{Rule: "tb", Key: fmt.Sprintf("%s-%d", prefix, i), Want: 1}
	}
	return out
}

// A node may add NewKeysPerNode keys a second: a call whose new keys its
// budget cannot pay is refused as a whole, with a RetryInfo, before it
// reaches the store; its keys already held, and other nodes, go on.
func TestNewKeysPerNodeAreCapped(t *testing.T) {
	api, _ := serveWith(t, server.Config{Store: memory(t), NewKeysPerNode: 20})
	c := ctx(t)
	acquire := func(node string, reqs ...[]*allotv1.LeaseRequest) error {
		var all []*allotv1.LeaseRequest
		for _, r := range reqs {
			all = append(all, r...)
		}
		_, err := api.Acquire(c, &allotv1.AcquireRequest{NodeId: node, Requests: all})
		return err
	}
	// 8 requests: no more than half the cap a second, so not counted.
	if err := acquire("n1", keyBatch("held", 8)); err != nil {
		t.Fatal(err)
	}
	// 21 requests this second: counted; 5 new of the 10 its bucket holds.
	if err := acquire("n1", keyBatch("held", 8), keyBatch("a", 5)); err != nil {
		t.Fatal(err)
	}
	// 20 new keys: more than the 5 left.
	err := acquire("n1", keyBatch("held", 8), keyBatch("flood", 20))
	s := status.Convert(err)
	if s.Code() != codes.ResourceExhausted || !strings.HasPrefix(s.Message(), "requests[8].key: ") ||
		!strings.Contains(s.Message(), "--max-new-keys-per-node") || !strings.Contains(s.Message(), "20 of this call's keys are new") {
		t.Fatalf("a flood of new keys: %v", err)
	}
	retry := false
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
			retry = true
		}
	}
	if !retry {
		t.Error("no RetryInfo on a refusal a node should retry later")
	}
	// The keys it holds are still served, and new keys within its budget.
	if err := acquire("n1", keyBatch("held", 8), keyBatch("a", 5)); err != nil {
		t.Fatalf("the node's held keys after its refusal: %v", err)
	}
	if err := acquire("n1", keyBatch("more", 2)); err != nil {
		t.Fatalf("new keys within the budget: %v", err)
	}
	// Another node has its own budget.
	if err := acquire("n2", keyBatch("other", 10)); err != nil {
		t.Fatalf("another node: %v", err)
	}
}

// Below the cap, no call pays for the count: a node sending no more
// requests a second than the cap cannot be adding more keys.
func TestNewKeysBelowTheCapAreNotCounted(t *testing.T) {
	api, _ := serveWith(t, server.Config{Store: memory(t), NewKeysPerNode: 1000})
	for i := range 5 {
		if _, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: keyBatch(fmt.Sprint("b", i), 100)}); err != nil {
			t.Fatal(err)
		}
	}
}
