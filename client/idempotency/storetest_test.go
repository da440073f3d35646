package idempotency

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/redistest"
)

// A store under test, and how to move its time: the memory store's clock
// is stepped; Redis's TTLs are its own, so there the test waits them out
// (a few tens of milliseconds, the least Redis allows to be exact).
type storeUnderTest struct {
	store   Store
	advance func(time.Duration)
}

// stores are the stores every conformance case runs against.
var stores = []struct {
	name string
	new  func(t *testing.T) storeUnderTest
}{
	{"memory", newMemoryUnderTest},
	{"redis", newRedisUnderTest},
}

func newMemoryUnderTest(*testing.T) storeUnderTest {
	s := NewMemoryStore()
	clk := newTestClock()
	s.now = clk.Now
	return storeUnderTest{store: s, advance: clk.Advance}
}

func newRedisUnderTest(t *testing.T) storeUnderTest {
	return storeUnderTest{store: NewRedisStore(sharedRedis(t)), advance: time.Sleep}
}

// sharedRedis is a client of the test binary's shared server (make test's,
// or one redistest starts), closed when the test ends.
func sharedRedis(t testing.TB) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// testClock is a clock that moves only when told to.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Unix(1_700_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testKey is a key no other test (or earlier run on a shared Redis) uses.
func testKey(t *testing.T) string { return "allot:idemtest:" + t.Name() + ":" + newToken() }

// The store's contract, once, for every store.
func TestStoreConformance(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, s storeUnderTest)
	}{
		{"ClaimThenInProgress", conformClaimThenInProgress},
		{"CompleteThenDone", conformCompleteThenDone},
		{"OnlyTheTokenActs", conformOnlyTheTokenActs},
		{"ReleaseFrees", conformReleaseFrees},
		{"LockExpires", conformLockExpires},
		{"ExtendKeeps", conformExtendKeeps},
		{"RecordExpires", conformRecordExpires},
		{"OneClaimOfMany", conformOneClaimOfMany},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, st.new(t)) })
			}
		})
	}
}

const lock = 100 * time.Millisecond // short: Redis waits it out for real

func mustClaim(t *testing.T, s Store, key, token, fp string, want State) Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), key, token, fp, lock)
	if err != nil {
		t.Fatalf("Claim(%s): %v", token, err)
	}
	if c.State != want {
		t.Fatalf("Claim(%s) = %v, want %v", token, c.State, want)
	}
	return c
}

func conformClaimThenInProgress(t *testing.T, s storeUnderTest) {
	k := testKey(t)
	mustClaim(t, s.store, k, "a", "fp1", Claimed)
	c := mustClaim(t, s.store, k, "b", "fp2", InProgress)
	if c.Fingerprint != "fp1" {
		t.Errorf("in progress: fingerprint %q, want the holder's fp1", c.Fingerprint)
	}
}

func conformCompleteThenDone(t *testing.T, s storeUnderTest) {
	ctx := context.Background()
	for _, rec := range []*Record{
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "X-Two": {"1", "2"}}, Body: []byte(`{"id":7}`)},
		{Status: 204},
		{Status: 200, Truncated: true},
	} {
		k := testKey(t)
		mustClaim(t, s.store, k, "a", "fp", Claimed)
		if err := s.store.Complete(ctx, k, "a", rec, time.Hour); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		c := mustClaim(t, s.store, k, "b", "other", Done)
		want := *rec
		want.Fingerprint = "fp"
		got := *c.Record
		got.Fingerprint = c.Fingerprint
		if len(got.Body) == 0 {
			got.Body = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("stored %+v, got back %+v", want, got)
		}
	}
}

func conformOnlyTheTokenActs(t *testing.T, s storeUnderTest) {
	ctx := context.Background()
	k := testKey(t)
	mustClaim(t, s.store, k, "a", "fp", Claimed)
	if err := s.store.Extend(ctx, k, "b", lock); !errors.Is(err, ErrClaimLost) {
		t.Errorf("Extend with another token: %v, want ErrClaimLost", err)
	}
	if err := s.store.Complete(ctx, k, "b", &Record{Status: 200}, time.Hour); !errors.Is(err, ErrClaimLost) {
		t.Errorf("Complete with another token: %v, want ErrClaimLost", err)
	}
	if err := s.store.Release(ctx, k, "b"); err != nil {
		t.Errorf("Release with another token: %v", err)
	}
	mustClaim(t, s.store, k, "c", "fp", InProgress) // b's release did nothing
	if err := s.store.Complete(ctx, k, "a", &Record{Status: 200}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := s.store.Complete(ctx, k, "a", &Record{Status: 500}, time.Hour); !errors.Is(err, ErrClaimLost) {
		t.Errorf("a second Complete: %v, want ErrClaimLost", err)
	}
	if err := s.store.Release(ctx, k, "a"); err != nil {
		t.Errorf("Release after Complete: %v", err)
	}
	if c := mustClaim(t, s.store, k, "d", "fp", Done); c.Record.Status != 200 {
		t.Errorf("status %d after a second Complete and a Release, want the first's 200", c.Record.Status)
	}
}

func conformReleaseFrees(t *testing.T, s storeUnderTest) {
	k := testKey(t)
	mustClaim(t, s.store, k, "a", "fp", Claimed)
	if err := s.store.Release(context.Background(), k, "a"); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s.store, k, "b", "fp", Claimed)
}

func conformLockExpires(t *testing.T, s storeUnderTest) {
	k := testKey(t)
	mustClaim(t, s.store, k, "a", "fp", Claimed)
	s.advance(lock + 10*time.Millisecond)
	mustClaim(t, s.store, k, "b", "fp", Claimed)
	if err := s.store.Complete(context.Background(), k, "a", &Record{Status: 200}, time.Hour); !errors.Is(err, ErrClaimLost) {
		t.Errorf("Complete by an expired claim: %v, want ErrClaimLost", err)
	}
}

func conformExtendKeeps(t *testing.T, s storeUnderTest) {
	k := testKey(t)
	mustClaim(t, s.store, k, "a", "fp", Claimed)
	for range 3 {
		s.advance(lock / 2)
		if err := s.store.Extend(context.Background(), k, "a", lock); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	mustClaim(t, s.store, k, "b", "fp", InProgress) // 1.5 locks after the claim
}

func conformRecordExpires(t *testing.T, s storeUnderTest) {
	k := testKey(t)
	mustClaim(t, s.store, k, "a", "fp", Claimed)
	if err := s.store.Complete(context.Background(), k, "a", &Record{Status: 200}, lock); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s.store, k, "b", "fp", Done)
	s.advance(lock + 10*time.Millisecond)
	mustClaim(t, s.store, k, "c", "fp", Claimed)
}

func conformOneClaimOfMany(t *testing.T, s storeUnderTest) {
	k := testKey(t)
	var claimed, busy atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			c, err := s.store.Claim(context.Background(), k, newToken(), "fp", time.Minute)
			switch {
			case err != nil:
				t.Error(err)
			case c.State == Claimed:
				claimed.Add(1)
			case c.State == InProgress:
				busy.Add(1)
			}
		})
	}
	wg.Wait()
	if claimed.Load() != 1 || busy.Load() != 49 {
		t.Errorf("50 claims of one key: %d claimed, %d in progress; want 1 and 49", claimed.Load(), busy.Load())
	}
}
