package allocator_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
)

// On the memory store, MemoryMaxKeys caps the keys: a new key past it is
// refused with ResourceExhausted naming the cap, the keys held keep
// working, and the metrics say how full the store is and what it refused.
func TestMemoryStoreCap(t *testing.T) {
	a, conn := start(t, allocator.Config{Rules: uniqueRules(t, exactRules), MemoryMaxKeys: 2})
	api := allotv1.NewAllocatorClient(conn)
	rule := name(a.Rules(), 0)
	for _, k := range []string{"a", "b"} {
		if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: rule, Key: k, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: rule, Key: "c", Cost: 1})
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "the cap is 2") {
		t.Errorf("a new key at the cap: %v", err)
	}
	if d, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: rule, Key: "a", Cost: 1}); err != nil || !d.GetAllowed() {
		t.Errorf("a key held: %v, %v", d, err)
	}
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "allot_allocator_store_") {
			m := mf.GetMetric()[0]
			got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"allot_allocator_store_keys": 2, "allot_allocator_store_max_keys": 2,
		"allot_allocator_store_refused_total": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
