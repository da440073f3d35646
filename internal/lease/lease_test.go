package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// storeTransport serves leases from a real memory store on the test's fake
// clock: the allocator's semantics without the network.
type storeTransport struct {
	s        store.Store
	set      *rules.Set
	node     string
	mu       sync.Mutex
	batches  []int // keys per Acquire
	released int64
	// releaseCalls counts Release calls that reached the store.
	releaseCalls atomic.Int64
	returned     atomic.Int64 // tokens given back with Acquires
	last         []Request    // the newest Acquire's requests, under mu
	lastGrants   []Grant      // and their answers, under mu
	down         atomic.Bool
	during       func() // runs inside Acquire, while the request is in flight
	reject       string // a key whose presence fails the whole batch
	// refuseAll refuses every call as a whole, as an allocator whose store
	// answers an error that retrying will not cure.
	refuseAll atomic.Bool
	// loseReplies is how many answers to lose after the store applied them.
	loseReplies atomic.Int32
}

var errDown = errors.New("allocator unreachable")

func (tr *storeTransport) Acquire(ctx context.Context, reqs []Request) ([]Grant, string, error) {
	if tr.down.Load() {
		return nil, "", errDown
	}
	if tr.during != nil {
		tr.during()
	}
	for i, r := range reqs {
		if tr.reject != "" && r.Key == tr.reject {
			tr.mu.Lock()
			tr.batches = append(tr.batches, len(reqs))
			tr.mu.Unlock()
			return nil, "", &Rejection{Request: i, Err: fmt.Errorf("requests[%d].key: %q", i, r.Key)}
		}
	}
	if tr.refuseAll.Load() {
		tr.mu.Lock()
		tr.batches = append(tr.batches, len(reqs))
		tr.mu.Unlock()
		return nil, "", &Rejection{Request: -1, Err: errors.New("store error: NOPERM")}
	}
	tr.mu.Lock()
	tr.last = append([]Request(nil), reqs...)
	tr.mu.Unlock()
	sreqs := make([]store.AcquireRequest, len(reqs))
	for i, r := range reqs {
		tr.returned.Add(r.Returned)
		rule, _ := tr.set.Get(r.Rule)
		sreqs[i] = store.AcquireRequest{Rule: rule, Key: r.Key, Node: tr.node, Want: min(r.Want, rule.Lease.Max),
			Consumed: r.Consumed, ConsumedAge: r.ConsumedAge, WantRate: min(r.WantRate, rule.Rate()),
			Returned: r.Returned, ReturnedEpoch: r.ReturnedEpoch, Seq: int64(r.Seq)}
	}
	ls, err := tr.s.Acquire(ctx, sreqs)
	if err != nil {
		return nil, "", err
	}
	if tr.loseReplies.Load() > 0 { // applied, but the answer never comes back
		tr.loseReplies.Add(-1)
		return nil, "", errDown
	}
	tr.mu.Lock()
	tr.batches = append(tr.batches, len(reqs))
	tr.mu.Unlock()
	out := make([]Grant, len(ls))
	for i, l := range ls {
		out[i] = Grant{Granted: l.Granted, Remaining: l.Remaining, TTL: l.TTL, RetryAfter: l.RetryAfter, Holders: l.Holders,
			Epoch: l.Epoch, Rate: l.Rate, FullFor: l.FullFor, FullInTTL: l.FullInTTL}
	}
	tr.mu.Lock()
	tr.lastGrants = append(tr.lastGrants[:0], out...)
	tr.mu.Unlock()
	return out, tr.set.Version(), nil
}

func (tr *storeTransport) Release(ctx context.Context, rets []Return) error {
	if tr.down.Load() {
		return errDown
	}
	tr.releaseCalls.Add(1)
	srets := make([]store.Return, len(rets))
	for i, r := range rets {
		rule, _ := tr.set.Get(r.Rule)
		srets[i] = store.Return{Rule: rule, Key: r.Key, Node: tr.node, Tokens: r.Tokens, Epoch: r.Epoch}
		atomic.AddInt64(&tr.released, r.Tokens)
	}
	return tr.s.Release(ctx, srets)
}

func (tr *storeTransport) calls() []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]int(nil), tr.batches...)
}

type fixture struct {
	far *farTransport // when the allocator is far away; nil: next door
	t   *testing.T
	clk *clock.Fake
	st  *store.Memory
	tr  *storeTransport
	m   *Manager
	set *rules.Set
}

const testRules = `
rules:
  - name: r
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 1000
    lease: { min: 10, max: 500, ttl: 1s, refresh: 100ms }
  - name: short
    algorithm: token_bucket
    limit: 100000
    period: 24h
    lease: { min: 100, max: 100, ttl: 8ms, refresh: 4ms }
  - name: day
    algorithm: token_bucket
    limit: 100000
    period: 24h
    lease: { min: 100, max: 100, ttl: 1s, refresh: 100ms }
`

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, nil) }

// newFixtureWith lets a test change the manager's configuration.
func newFixtureWith(t *testing.T, configure func(*Config)) *fixture {
	t.Helper()
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := store.NewMemory(clk)
	tr := &storeTransport{s: st, set: set, node: "n1"}
	// No gap between calls: the tests step the clock by a millisecond or two
	// and expect each refill to leave at once (TestCallsArePaced has gaps).
	cfg := Config{Transport: tr, Clock: clk, Sweep: 10 * time.Millisecond, BatchWindow: time.Millisecond, CallGap: time.Nanosecond}
	if configure != nil {
		configure(&cfg)
	}
	m := NewManager(cfg)
	f := &fixture{t: t, clk: clk, st: st, tr: tr, m: m, set: set}
	t.Cleanup(func() {
		m.Close(context.Background())
		st.Close()
	})
	return f
}

func (f *fixture) table(name string) *Table {
	r, _ := f.set.Get(name)
	return f.m.Table(r)
}

// settle waits until the manager has handled everything it can at this
// instant: no RPC in flight, no result or signal waiting, the loop parked.
func (f *fixture) settle() {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	parked := func() int32 {
		if f.far == nil {
			return 0
		}
		return f.far.parked.Load()
	}
	for time.Now().Before(deadline) {
		if f.m.calls.Load() == parked() {
			c := make(chan struct{})
			f.m.sync <- c
			<-c
			if f.m.calls.Load() == parked() && len(f.m.results) == 0 && f.m.inbox.len() == 0 {
				return
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
	f.t.Fatal("manager did not settle")
}

// step advances the fake clock in small steps, settling around each.
func (f *fixture) step(total, by time.Duration) {
	f.settle()
	for d := time.Duration(0); d < total; d += by {
		f.clk.Advance(by)
		if f.far != nil {
			f.settle() // requests due now go out before answers come back
			f.far.deliver(f.clk.Now())
		}
		f.settle()
	}
}

func TestNewKeyGetsFirstLease(t *testing.T) {
	f := newFixture(t)
	p := f.table("r").Pool("k")
	if _, ok := p.Take(1); ok {
		t.Fatal("a new key held tokens before any lease")
	}
	if p.Served() {
		t.Fatal("a new key is served before the allocator answered")
	}
	f.step(2*time.Millisecond, time.Millisecond)
	// First lease: the node's share of one refresh interval, 1000/s x 100ms.
	if got := p.Tokens(); got != 100 {
		t.Fatalf("tokens after the first lease = %d, want 100", got)
	}
	if !p.Served() || p.Holders() != 1 {
		t.Fatalf("served %v holders %d", p.Served(), p.Holders())
	}
}

// A key without a share of the rate refills ahead, at its watermark.
func TestRefillAheadOneInFlight(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.TokensOnly = true })
	p := f.table("day").Pool("k")
	f.step(2*time.Millisecond, time.Millisecond)
	if p.Tokens() != 100 {
		t.Fatalf("tokens %d, want 100", p.Tokens())
	}
	calls := len(f.tr.calls())
	// Spend down to the watermark (50): no refill yet.
	for range 50 {
		if _, ok := p.Take(1); !ok {
			t.Fatal("take failed")
		}
	}
	f.settle()
	if got := len(f.tr.calls()); got != calls {
		t.Fatalf("%d Acquires above the watermark", got-calls)
	}
	// One below the watermark asks once, however many takes follow.
	for range 20 {
		p.Take(1)
	}
	f.step(2*time.Millisecond, time.Millisecond)
	if got := len(f.tr.calls()); got != calls+1 {
		t.Fatalf("%d Acquires after crossing the watermark, want 1", got-calls)
	}
	if got := p.Tokens(); got != 130 {
		t.Fatalf("tokens %d after the refill, want 30 + 100", got)
	}
}

func TestRefillsShareOneAcquire(t *testing.T) {
	f := newFixture(t)
	tb := f.table("day")
	for i := range 200 {
		tb.Pool(string(rune('a'+i%26)) + string(rune('0'+i/26)))
	}
	f.step(2*time.Millisecond, time.Millisecond)
	calls := f.tr.calls()
	if len(calls) != 1 || calls[0] != 200 {
		t.Fatalf("Acquire batches %v, want one of 200 keys", calls)
	}
}

func TestLeaseExpires(t *testing.T) {
	// Tokens only: a share's renewals would extend the lease (share_test.go).
	f := newFixtureWith(t, func(c *Config) { c.TokensOnly = true })
	p := f.table("day").Pool("k")
	f.step(2*time.Millisecond, time.Millisecond)
	if p.Tokens() != 100 {
		t.Fatalf("tokens %d", p.Tokens())
	}
	// One take every 20ms keeps the key active and above its watermark (50),
	// so no refill extends the lease. TTL 1s from the send, treated as
	// ending one sweep (10ms) early.
	for range 49 {
		p.Take(1)
		f.step(20*time.Millisecond, 10*time.Millisecond)
	}
	if p.Tokens() != 51 {
		t.Fatalf("tokens %d at 982ms, want 51 still usable", p.Tokens())
	}
	f.step(20*time.Millisecond, 10*time.Millisecond)
	if got := p.Tokens(); got != 0 {
		t.Fatalf("tokens %d after the lease's end, want 0", got)
	}
}

func TestIdleKeyReturnsTokens(t *testing.T) {
	f := newFixture(t)
	tb := f.table("day")
	p := tb.Pool("k")
	f.step(2*time.Millisecond, time.Millisecond)
	p.Take(10)
	// Idle for half the TTL (500ms) after its use, which the loop learns at
	// its idle check (500ms) and dates to the middle of the time since the
	// last look (250ms): the 90 left go back at 750ms, before the lease ends
	// (990ms), and the key leaves.
	f.step(800*time.Millisecond, 10*time.Millisecond)
	f.settle()
	if got := atomic.LoadInt64(&f.tr.released); got != 90 {
		t.Fatalf("released %d, want the 90 unused tokens", got)
	}
	if tb.Len() != 0 {
		t.Fatalf("%d pools left after idling", tb.Len())
	}
	if _, ok := p.Take(1); ok {
		t.Fatal("an evicted pool still gave tokens")
	}
	if left, _ := p.Take(1); left >= 0 {
		t.Fatal("an evicted pool does not tell the caller to look again")
	}
}

func TestConsumedIsReported(t *testing.T) {
	f := newFixture(t)
	p := f.table("day").Pool("k")
	p.Consumed(40) // admitted from the fallback share before the first lease
	f.step(2*time.Millisecond, time.Millisecond)
	r, _ := f.set.Get("day")
	d, err := f.st.Check(context.Background(), r, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 - 40 consumed - 100 leased - 1 checked.
	if d.Remaining != 99859 {
		t.Fatalf("central remaining %d, want 99859", d.Remaining)
	}
}

// What a new key admits from its fallback share while its first Acquire is
// in flight is paid from the lease that Acquire brings.
func TestConsumptionInFlightIsPaidFromTheLease(t *testing.T) {
	f := newFixture(t)
	p := f.table("day").Pool("k")
	p.Consumed(1)
	f.tr.during = func() { p.Consumed(3) }
	f.step(2*time.Millisecond, time.Millisecond)
	f.tr.during = nil
	if got := p.Tokens(); got != 97 {
		t.Fatalf("tokens %d, want 100 granted less the 3 admitted in flight", got)
	}
	f.step(30*time.Millisecond, 10*time.Millisecond)
	r, _ := f.set.Get("day")
	d, _ := f.st.Check(context.Background(), r, "k", 1)
	// Central: 100,000 - 1 reported - 100 granted - 1 checked; the 3 were
	// paid locally, not reported again.
	if d.Remaining != 99898 {
		t.Fatalf("central remaining %d, want 99898", d.Remaining)
	}
}

func TestOutageAndRecovery(t *testing.T) {
	f := newFixture(t)
	f.tr.down.Store(true)
	p := f.table("day").Pool("k")
	p.Consumed(5)
	f.step(5*time.Millisecond, time.Millisecond)
	if !f.m.Down() {
		t.Fatal("manager did not notice the outage")
	}
	if p.Served() {
		t.Fatal("served during an outage")
	}
	calls := len(f.tr.calls())
	f.tr.down.Store(false)
	f.step(300*time.Millisecond, 10*time.Millisecond) // past the first backoffs
	if f.m.Down() {
		t.Fatal("manager did not recover")
	}
	if len(f.tr.calls()) <= calls || p.Tokens() == 0 {
		t.Fatalf("no lease after recovery: tokens %d", p.Tokens())
	}
	r, _ := f.set.Get("day")
	d, _ := f.st.Check(context.Background(), r, "k", 1)
	if d.Remaining != 100000-5-p.Tokens()-1 {
		t.Fatalf("central remaining %d: the 5 consumed during the outage were not debited", d.Remaining)
	}
}

func TestSizeFollowsRate(t *testing.T) {
	f := newFixture(t)
	p := f.table("r").Pool("k")
	f.step(2*time.Millisecond, time.Millisecond)
	// Demand of 2 tokens per ms = 2000/s: the size should approach 200
	// (rate x 100ms refresh), capped by what the allocator grants.
	for range 400 {
		if _, ok := p.Take(10); !ok {
			p.Refused(10)
		}
		f.clk.Advance(5 * time.Millisecond)
		f.settle()
	}
	// After 2s (4 time constants) the estimate is within 2% of 2000/s.
	size := p.low.Load() * 2
	if size < 190 || size > 210 {
		t.Fatalf("lease size %d after 2s at 2000/s, want about 200", size)
	}
}

func TestCloseReturnsEverything(t *testing.T) {
	f := newFixture(t)
	p := f.table("day").Pool("k")
	f.step(2*time.Millisecond, time.Millisecond)
	p.Take(1)
	q := f.table("r").Pool("q")
	q.Consumed(3)
	if err := f.m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := atomic.LoadInt64(&f.tr.released); got != 99 {
		t.Fatalf("released %d on Close, want 99", got)
	}
	r, _ := f.set.Get("r")
	d, _ := f.st.Check(context.Background(), r, "q", 1)
	if d.Remaining != 1000-3-1 {
		t.Fatalf("remaining %d: consumption was not reported on Close", d.Remaining)
	}
}

// A rule that goes away takes its pools with it; when it comes back its
// keys start afresh and lease again.
func TestRuleRemovedAndRestored(t *testing.T) {
	f := newFixture(t)
	r, _ := f.set.Get("day")
	p := f.m.Table(r).Pool("k")
	p.Consumed(2) // unreportable once the rule is gone
	f.m.Forget("day")
	f.step(30*time.Millisecond, 10*time.Millisecond)
	if f.m.Table(r) == p.table {
		t.Fatal("a rule that came back kept the table of the one that went")
	}
	q := f.m.Table(r).Pool("k")
	f.step(10*time.Millisecond, time.Millisecond)
	if q.Tokens() != 100 {
		t.Fatalf("tokens %d for a key of a restored rule, want a fresh lease of 100", q.Tokens())
	}
	if got := len(f.m.tableList()); got != 1 {
		t.Fatalf("%d tables kept, want 1", got)
	}
}

// A lease shorter than two sweeps is still usable: it ends at half its TTL,
// exactly, instead of being dropped on arrival.
func TestShortLeaseIsUsable(t *testing.T) {
	f := newFixture(t) // sweep 10ms, lease TTL 8ms
	p := f.table("short").Pool("k")
	f.step(time.Millisecond, time.Millisecond)
	deadline := time.Now().Add(time.Second) // the grant may still be on its way in
	for p.Tokens() != 100 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	if got := p.Tokens(); got != 100 {
		t.Fatalf("tokens %d of an 8ms lease, want 100", got)
	}
	p.Take(1) // keep it active
	f.step(3*time.Millisecond, time.Millisecond)
	if p.Tokens() == 0 {
		t.Fatal("tokens gone before half the TTL")
	}
	// At half the TTL the 99 left are gone; an active key asks again and
	// may already hold a fresh lease of 100.
	f.step(2*time.Millisecond, time.Millisecond)
	if got := p.Tokens(); got != 0 && got != 100 {
		t.Fatalf("tokens %d after half the TTL, want the first lease's 99 gone", got)
	}
}

// Close returns the tokens of a grant that was still on its way.
func TestCloseReturnsGrantInFlight(t *testing.T) {
	f := newFixture(t)
	p := f.table("day").Pool("k")
	release := make(chan struct{})
	entered := make(chan struct{})
	f.tr.during = func() { close(entered); <-release }
	f.settle()
	f.clk.Advance(2 * time.Millisecond) // the refill goes out and blocks in flight
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the refill never went out")
	}
	done := make(chan error, 1)
	go func() { done <- f.m.Close(context.Background()) }()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := atomic.LoadInt64(&f.tr.released); got != 100 {
		t.Fatalf("released %d on Close, want the 100 granted while closing", got)
	}
	_ = p
}

// Tokens given back after their lease ended stay gone.
func TestGiveAfterExpiryIsDropped(t *testing.T) {
	f := newFixture(t)
	p := f.table("short").Pool("k")
	f.step(time.Millisecond, time.Millisecond)
	deadline := time.Now().Add(time.Second)
	for p.Tokens() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	gen := p.Generation()
	if _, ok := p.Take(10); !ok {
		t.Fatal("no lease")
	}
	f.tr.down.Store(true) // no new lease may arrive
	f.step(5*time.Millisecond, time.Millisecond)
	p.Give(10, gen)
	if got := p.Tokens(); got != 0 {
		t.Fatalf("tokens %d after giving back into an ended lease, want 0", got)
	}
	gen = p.Generation()
	p.Give(0, gen) // same generation: accepted (nothing to add)
}

// One key the allocator rejects does not hold up the keys it shared a
// batch with: they ask again alone, at once.
func TestRejectedBatchIsolatesTheBadKey(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.TokensOnly = true }) // no renewals: every call is a refill
	f.tr.reject = "bad"
	good := f.table("day").Pool("good")
	bad := f.table("day").Pool("bad")
	f.step(2*time.Millisecond, time.Millisecond)
	if got := good.Tokens(); got != 100 {
		t.Fatalf("good key holds %d after a batch rejected for another key, want its lease of 100 (batches %v)", got, f.tr.calls())
	}
	if bad.Tokens() != 0 {
		t.Fatal("the rejected key got tokens")
	}
	calls := len(f.tr.calls())
	f.step(500*time.Millisecond, 50*time.Millisecond)
	if got := len(f.tr.calls()); got != calls {
		t.Fatalf("%d more calls within the rejected key's second of backoff", got-calls)
	}
}

// A call the allocator refuses as a whole (a store error that retrying will
// not cure) backs off whole, doubling, and comes back whole once the
// allocator serves again. Before, it split into one call per key, each
// retried every second for good: 100 keys made 100 calls a second.
func TestRefusedCallBacksOffAsAWhole(t *testing.T) {
	f := newFixture(t)
	f.tr.refuseAll.Store(true)
	tb := f.table("day")
	var pools []*Pool
	for i := range 100 {
		pools = append(pools, tb.Pool(fmt.Sprintf("k%d", i)))
	}
	busy := func() { // the keys stay in use: a key unused for long leaves
		for _, p := range pools {
			p.Take(1)
		}
	}
	for range 50 {
		busy()
		f.step(100*time.Millisecond, 10*time.Millisecond)
	}
	calls := f.tr.calls()
	for _, n := range calls {
		if n != 100 {
			t.Fatalf("batches %v: a refused call was split", calls)
		}
	}
	if len(calls) > 8 { // 250ms, 500ms, 1s, 2s... from the first call
		t.Fatalf("%d calls in 5s while the allocator refused them: no backoff", len(calls))
	}
	f.tr.refuseAll.Store(false)
	for waited := time.Duration(0); len(f.tr.calls()) == len(calls); waited += 10 * time.Millisecond {
		if waited > 11*time.Second { // the longest backoff and some
			t.Fatal("no call 11s after the allocator serves again")
		}
		busy()
		f.step(10*time.Millisecond, 10*time.Millisecond)
	}
	for i, p := range pools {
		if p.Tokens() == 0 {
			t.Fatalf("key %d has no lease 11s after the allocator serves again (batches %v, then %v)", i, calls, f.tr.calls()[len(calls):])
		}
	}
	if got := f.tr.calls()[len(calls)]; got != 100 {
		t.Fatalf("the first call after the refusals carried %d keys, want all 100", got)
	}
}

// An answer lost after the allocator applied the request: the retry carries
// the same sequence number and is answered again, so the grant is not lost
// and the consumption it reported is debited once. Before, the retry was a
// new request: the first grant stayed lent to nobody and the consumption
// was debited twice.
func TestLostAnswerIsAppliedOnce(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.TokensOnly = true })
	r, _ := f.set.Get("day")
	p := f.table("day").Pool("k")
	p.Consumed(40)
	f.tr.loseReplies.Store(1)
	f.step(500*time.Millisecond, 10*time.Millisecond) // the lost answer, its backoff, the retry
	if got := p.Tokens(); got != 100 {
		t.Fatalf("tokens %d after the retry, want the grant of 100", got)
	}
	d, err := f.st.Check(t.Context(), r, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 - 40 consumed (once) - 100 granted (once) - 1.
	if d.Remaining != 99859 {
		t.Fatalf("central remaining %d, want 99859: the retry was applied again", d.Remaining)
	}
}

// A flow of keys each asking once shares calls: at most one Acquire every
// CallGap (unless one is full), each carrying every key that asked
// meanwhile. 100 new keys over 20ms make 5 or 6 calls, not 20.
func TestCallsArePaced(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.CallGap, c.TokensOnly = 5*time.Millisecond, true })
	tb := f.table("day")
	for i := range 100 {
		tb.Pool(fmt.Sprintf("k%d", i))
		if i%5 == 4 {
			f.clk.Advance(time.Millisecond)
			f.settle()
		}
	}
	f.step(20*time.Millisecond, time.Millisecond)
	calls := f.tr.calls()
	keys := 0
	for _, n := range calls {
		keys += n
	}
	if keys != 100 || len(calls) > 6 {
		t.Fatalf("calls %v for 100 keys asking over 20ms, want at most 6 calls (the first, then one per 5ms)", calls)
	}
}
