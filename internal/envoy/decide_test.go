package envoy_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// twoLimits is a domain with a tight limit (a) and a loose one (b).
func twoLimits(domain string) string {
	return fmt.Sprintf(`
envoy:
  domains:
    - domain: %s
      descriptors:
        - key: a
          rate_limit: { unit: day, requests_per_unit: 3 }
        - key: b
          rate_limit: { unit: day, requests_per_unit: 10 }
        - key: c
          rate_limit: { unit: day, requests_per_unit: 100 }
        - key: d
          rate_limit: { unit: day, requests_per_unit: 50 }
        - key: e
          rate_limit: { unit: day, requests_per_unit: 1000 }
`, domain)
}

// racing is a store in which, just before the first spend on one rule, a
// concurrent request takes everything that rule's key has left: the race
// the check-then-spend compromise is about.
type racing struct {
	store.Store
	rule string
	done atomic.Bool
}

func (s *racing) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (store.Decision, error) {
	if cost > 0 && r.Name == s.rule && s.done.CompareAndSwap(false, true) {
		left, err := s.Store.Check(ctx, r, key, 0)
		if err != nil {
			return left, err
		}
		if _, err := s.Store.Check(ctx, r, key, left.Remaining); err != nil {
			return left, err
		}
	}
	return s.Store.Check(ctx, r, key, cost)
}

func ruleOf(t *testing.T, set *rules.Set, domain, entry string) string {
	t.Helper()
	d, _ := set.Envoy().Domain(domain)
	l := d.Lookup(1, func(int) (string, string) { return entry, "x" })
	if l == nil || l.Rule == nil {
		t.Fatalf("no rule for %s", entry)
	}
	return l.Rule.Name
}

// Several limits are decided by a peek at each, then a spend on each,
// tightest first. A concurrent request that takes the tightest limit's
// last tokens between the two phases costs the request nothing; one that
// takes another limit's leaves the tighter one charged for a refused
// request: the documented compromise, counted in
// allot_envoy_partial_charges_total. No request is ever admitted over a
// limit.
func TestCheckThenSpendCompromise(t *testing.T) {
	for _, c := range []struct {
		name        string
		steal       string   // the limit the concurrent request empties
		wantStatus  []status // of the raced request
		wantLeft    []status // what a and b have left afterwards
		wantPartial float64
	}{
		{"race on the tightest limit", "a", []status{{over, 3, 0}, {ok, 10, 10}}, []status{{ok, 3, 0}, {ok, 10, 10}}, 0},
		{"race on a looser limit", "b", []status{{ok, 3, 2}, {over, 10, 0}}, []status{{ok, 3, 2}, {ok, 10, 0}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			set := parse(t, twoLimits("race"))
			mem := store.NewMemory(clock.NewFake(t0))
			defer mem.Close()
			r := serve(t, allocator.Config{Rules: set, Store: &racing{Store: mem, rule: ruleOf(t, set, "race", c.steal)}})
			expect(t, "raced request", r.ask(t, "race", 0, desc("a=x"), desc("b=x")), over, c.wantStatus...)
			if got := metric(t, r.a.Registry(), "allot_envoy_partial_charges_total", nil); got != c.wantPartial {
				t.Fatalf("partial charges %v, want %v", got, c.wantPartial)
			}
			qa, qb := desc("a=x"), desc("b=x")
			qa.HitsAddend, qb.HitsAddend = wrapperspb.UInt64(0), wrapperspb.UInt64(0)
			expect(t, "left afterwards", r.ask(t, "race", 0, qa, qb), ok, c.wantLeft...)
		})
	}
}

// Concurrent requests through real gRPC never pass a limit: 1,000 against
// a limit of 100 pass exactly 100, and 300 against a limit of 50 beside
// one of 1,000 pass exactly 50 while the second limit pays for exactly
// those 50. On the memory store and on Redis.
func TestConcurrentRequestsAreExact(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		mem := store.NewMemory(clock.Real())
		defer mem.Close()
		concurrentExact(t, store.Store(mem))
	})
	t.Run("redis", func(t *testing.T) {
		s, err := store.DialRedis(redistest.URL(t), store.RedisOptions{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		concurrentExact(t, s)
	})
}

func concurrentExact(t *testing.T, s store.Store) {
	domain := fmt.Sprintf("exact-%d", time.Now().UnixNano()) // its own keys in a shared Redis
	r := serve(t, allocator.Config{Rules: parse(t, twoLimits(domain)), Store: s, MaxInFlight: -1, StoreTimeout: 5 * time.Second})
	admitted := func(n int, ds ...*ratelimitpb.RateLimitDescriptor) int {
		var passed atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, err := r.call(domain, 0, ds...)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetOverallCode() == ok {
					passed.Add(1)
				}
			})
		}
		wg.Wait()
		return int(passed.Load())
	}
	if got := admitted(1000, desc("c=x")); got != 100 {
		t.Fatalf("1,000 requests against 100 admitted %d", got)
	}
	if got := admitted(300, desc("d=x"), desc("e=x")); got != 50 {
		t.Fatalf("300 requests against 50 and 1,000 admitted %d", got)
	}
	q := desc("e=x")
	q.HitsAddend = wrapperspb.UInt64(0)
	expect(t, "the looser limit", r.ask(t, domain, 0, q), ok, status{ok, 1000, 950})
}
