package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

var overrideRuleSeq atomic.Int64

// testOverrides is what every Overrides must do, on rules of its own.
func testOverrides(t *testing.T, o store.Overrides) {
	ctx := context.Background()
	rule := fmt.Sprintf("ov-%d-%d", time.Now().UnixNano(), overrideRuleSeq.Add(1))
	other := rule + "-other"
	vs, err := o.OverrideVersions(ctx, []string{rule, other})
	if err != nil || vs[0] != 0 || vs[1] != 0 {
		t.Fatalf("versions of rules never written: %v %v, want zeros", vs, err)
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	a := rules.RuntimeOverride{Rule: rule, Key: "tenant-42", Limit: 10000, Burst: 2000, Expires: at.Add(time.Hour),
		SetBy: "token:ab12", SetAt: at, Note: "ticket 7"}
	v1, err := o.PutOverride(ctx, a, 2)
	if err != nil {
		t.Fatal(err)
	}
	b := rules.RuntimeOverride{Rule: rule, Key: "k:with\x00odd*chars {}", Limit: 5}
	v2, err := o.PutOverride(ctx, b, 2)
	if err != nil || v2 <= v1 {
		t.Fatalf("second put: version %d after %d, %v", v2, v1, err)
	}
	if _, err := o.PutOverride(ctx, rules.RuntimeOverride{Rule: rule, Key: "third", Limit: 1}, 2); !errors.Is(err, store.ErrOverridesFull) {
		t.Fatalf("a third override under a cap of 2: %v, want ErrOverridesFull", err)
	}
	a.Limit = 20000 // a key held is replaced, cap or no cap
	v3, err := o.PutOverride(ctx, a, 2)
	if err != nil || v3 <= v2 {
		t.Fatalf("replacing: version %d after %d, %v", v3, v2, err)
	}
	version, got, err := o.LoadOverrides(ctx, rule)
	if err != nil || version != v3 || len(got) != 2 {
		t.Fatalf("load: version %d (want %d), %d overrides, %v", version, v3, len(got), err)
	}
	for _, g := range got {
		want := b
		if g.Key == a.Key {
			want = a
		}
		if !sameOverride(g, want) {
			t.Errorf("loaded %+v, want %+v", g, want)
		}
	}
	vs, err = o.OverrideVersions(ctx, []string{rule, other})
	if err != nil || vs[0] != v3 || vs[1] != 0 {
		t.Fatalf("versions: %v %v, want [%d 0]", vs, err, v3)
	}

	stale := a
	stale.Limit = 10000
	if ok, err := o.ExpireOverride(ctx, stale); ok || err != nil {
		t.Fatalf("expiring an override replaced since: %v %v, want it kept", ok, err)
	}
	if ok, err := o.ExpireOverride(ctx, a); !ok || err != nil {
		t.Fatalf("expiring the override as it is: %v %v", ok, err)
	}
	old, ok, err := o.DeleteOverride(ctx, rule, b.Key)
	if !ok || err != nil || !sameOverride(old, b) {
		t.Fatalf("delete: %+v %v %v", old, ok, err)
	}
	if _, ok, err := o.DeleteOverride(ctx, rule, b.Key); ok || err != nil {
		t.Fatalf("deleting again: %v %v, want nothing deleted", ok, err)
	}
	version, got, err = o.LoadOverrides(ctx, rule)
	if err != nil || len(got) != 0 || version <= v3 {
		t.Fatalf("after deleting both: version %d (was %d), %v, %v", version, v3, got, err)
	}
}

func sameOverride(a, b rules.RuntimeOverride) bool {
	return a.Rule == b.Rule && a.Key == b.Key && a.Limit == b.Limit && a.Burst == b.Burst && a.Expires.Equal(b.Expires) &&
		a.SetBy == b.SetBy && a.SetAt.Equal(b.SetAt) && a.Note == b.Note
}

func TestMemoryOverrides(t *testing.T) { testOverrides(t, store.NewMemoryOverrides()) }

func TestRedisOverrides(t *testing.T) {
	testOverrides(t, dialRedis(t, redistest.URL(t), store.RedisOptions{Timeout: time.Second}))
}

// On Redis Cluster each call touches one rule's hash, one slot, and the
// versions of rules in several slots come in one pipelined call.
func TestRedisClusterOverrides(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := redistest.StartCluster(t, 3)
	s := dialRedis(t, c.URL(), store.RedisOptions{Timeout: time.Second, Cluster: true})
	testOverrides(t, s)
	ctx := context.Background()
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("cl-%d", i)
		names = append(names, name)
		if _, err := s.PutOverride(ctx, rules.RuntimeOverride{Rule: name, Key: "k", Limit: 1}, 10); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := s.OverrideVersions(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if v == 0 {
			t.Errorf("rule %s: version 0 after a put", names[i])
		}
	}
}

// An in-process store keeps its overrides in the process; Redis keeps
// them in Redis.
func TestOverridesOf(t *testing.T) {
	if _, shared := store.OverridesOf(store.NewMemory(clock.Real())); shared {
		t.Error("the memory store's overrides are said to be shared")
	}
	if _, shared := store.OverridesOf(dialRedis(t, redistest.URL(t), store.RedisOptions{})); !shared {
		t.Error("the Redis store's overrides are not said to be shared")
	}
}
