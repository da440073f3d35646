package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// At its cap on keys (the database's DBSIZE) the Redis store refuses a call
// that would add a key, naming the request, and keeps deciding for the
// keys it holds; below the cap again, new keys are taken.
func TestRedisKeyCap(t *testing.T) {
	srv := redistest.Start(t) // a database of its own: DBSIZE counts every key
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := dialRedis(t, srv.URL(), store.RedisOptions{Timeout: time.Second, MaxKeys: 3})
	r := newRule(t, rules.Rule{Name: "cap", Algorithm: rules.TokenBucket, Limit: 100, Period: time.Hour})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Check(ctx, r, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	s.PollKeys()
	if s.Keys() != 3 || s.MaxKeys() != 3 {
		t.Fatalf("keys %d of %d, want 3 of 3", s.Keys(), s.MaxKeys())
	}
	var full *store.FullError
	if _, err := s.Check(ctx, r, "d", 1); !errors.As(err, &full) || full.Store != "redis" || full.Max != 3 {
		t.Fatalf("Check on a new key at the cap: %v, want a *FullError of redis", err)
	}
	_, err := s.Acquire(ctx, []store.AcquireRequest{{Rule: r, Key: "a", Node: "n", Want: 1}, {Rule: r, Key: "e", Node: "n", Want: 1}})
	if !errors.As(err, &full) || full.Request != 1 {
		t.Fatalf("Acquire with a new key at the cap: %v, want a *FullError naming request 1", err)
	}
	if d, err := s.Check(ctx, r, "b", 1); err != nil || !d.Allowed {
		t.Fatalf("a key held at the cap: %+v %v", d, err)
	}
	if s.Refused() != 2 {
		t.Fatalf("refused %d calls, want 2", s.Refused())
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 3 {
		t.Fatalf("DBSIZE %d (%v) after the refusals, want the 3 keys", n, err)
	}
	// Room again: the new key is taken.
	if err := rdb.Del(ctx, "allot:tb3:{"+r.Name+"|c}").Err(); err != nil {
		t.Fatal(err)
	}
	s.PollKeys()
	if _, err := s.Check(ctx, r, "d", 1); err != nil {
		t.Fatalf("a new key below the cap: %v", err)
	}
}
