package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
	"github.com/allot-dev/allot/internal/store/storetest"
)

// TestRedisCluster runs the store on a real 3-master Redis Cluster: the
// conformance suite through DialRedis's cluster URL, and a spread of keys
// over slots and nodes through NewRedis on a ClusterClient.
func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) store.Store {
				return dialRedis(t, c.URL(), store.RedisOptions{Timeout: conformanceTimeout, Cluster: true})
			},
			Advance: func(t *testing.T, d time.Duration) { time.Sleep(d) },
		})
	})
	t.Run("KeysSpreadOverSlots", func(t *testing.T) { testClusterSpread(t, c) })
}

// testClusterSpread sends batches that touch many (rule, key) pairs, hence
// many slots on every node: each script touches one slot, so no call meets
// CROSSSLOT, and every algorithm answers as on a single Redis.
func testClusterSpread(t *testing.T, c *redistest.Cluster) {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer client.Close()
	s, err := store.NewRedis(client, store.RedisOptions{Timeout: conformanceTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var leasable []*rules.Rule
	for _, alg := range []rules.Algorithm{rules.TokenBucket, rules.FixedWindow, rules.SlidingWindow} {
		leasable = append(leasable, slowRule(t, alg, 10))
	}
	const keys = 100
	var reqs []store.AcquireRequest
	var rets []store.Return
	for _, r := range leasable {
		for k := range keys {
			reqs = append(reqs, store.AcquireRequest{Rule: r, Key: fmt.Sprintf("user-%d", k), Node: "n", Want: 4})
		}
	}
	ls, err := s.Acquire(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if l.Granted != 4 || l.Remaining != 6 || l.Holders != 1 {
			t.Fatalf("%s %s: %+v", reqs[i].Rule.Algorithm, reqs[i].Key, l)
		}
		rets = append(rets, store.Return{Rule: reqs[i].Rule, Key: reqs[i].Key, Node: "n", Tokens: 4, Epoch: l.Epoch, Held: 4, HeldKnown: true})
	}
	if err := s.Release(ctx, rets); err != nil {
		t.Fatal(err)
	}
	log := slowRule(t, rules.SlidingLog, 10)
	for _, r := range append(leasable, log) {
		for k := range keys {
			d, err := s.Check(ctx, r, fmt.Sprintf("user-%d", k), 10)
			if err != nil || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s user-%d after the release: %+v, %v; want the full 10", r.Algorithm, k, d, err)
			}
		}
	}
	checkSpread(t, client, 4*keys)
}

// checkSpread asserts that every master holds some of the keys and that
// they spread over many slots.
func checkSpread(t *testing.T, client *redis.ClusterClient, keys int) {
	t.Helper()
	var mu sync.Mutex
	slots := map[int64]bool{}
	err := client.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		names, err := m.Keys(ctx, "allot:*").Result()
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("master %s holds none of the keys", m.Options().Addr)
		}
		for _, k := range names {
			slot, err := m.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			slots[slot] = true
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) < keys/2 {
		t.Fatalf("%d keys in %d slots, want them spread over many", keys, len(slots))
	}
}
