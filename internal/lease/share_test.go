package lease

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

func parseRules(y string) (*rules.Set, error) { return rules.Parse("test", []byte(y)) }

// acquireAs asks the store for a share as another node would.
func (tr *storeTransport) acquireAs(t *testing.T, node string, r *rules.Rule, key string, wantRate float64) store.Lease {
	t.Helper()
	ls, err := tr.s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: key, Node: node, WantRate: wantRate}})
	if err != nil {
		t.Fatal(err)
	}
	return ls[0]
}

// farTransport is an allocator a round trip away on the fake clock: the
// store acts when the request leaves, and the answer arrives rtt later.
type farTransport struct {
	*storeTransport
	clk     *clock.Fake
	rtt     time.Duration
	mu      sync.Mutex
	waiting []farCall
	parked  atomic.Int32
	near    atomic.Bool // answers at once from now on (the test is over)
}

type farCall struct {
	due           time.Time
	release, done chan struct{}
}

func (ft *farTransport) Acquire(ctx context.Context, reqs []Request) ([]Grant, string, error) {
	grants, version, err := ft.storeTransport.Acquire(ctx, reqs)
	if ft.near.Load() {
		return grants, version, err
	}
	c := farCall{due: ft.clk.Now().Add(ft.rtt), release: make(chan struct{}), done: make(chan struct{})}
	ft.mu.Lock()
	ft.waiting = append(ft.waiting, c)
	ft.parked.Add(1)
	ft.mu.Unlock()
	<-c.release
	ft.parked.Add(-1)
	close(c.done)
	return grants, version, err
}

// deliver lets the answers due at now arrive, and waits until they have.
func (ft *farTransport) deliver(now time.Time) {
	ft.mu.Lock()
	var due []farCall
	keep := ft.waiting[:0]
	for _, c := range ft.waiting {
		if c.due.After(now) {
			keep = append(keep, c)
		} else {
			due = append(due, c)
		}
	}
	ft.waiting = keep
	ft.mu.Unlock()
	for _, c := range due {
		close(c.release)
		<-c.done
	}
}

func (ft *farTransport) releaseAll() {
	ft.near.Store(true)
	ft.deliver(time.Unix(1<<40, 0))
}

// farRules: a rule whose burst is a tenth of a second of its rate, so that
// a round trip of more than 100ms starves a node living on tokens alone.
const farRules = `
rules:
  - name: far
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 100
    lease: { ttl: 2s, refresh: 200ms }
  - name: lazy
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 100
    lease: { ttl: 2s, refresh: 1500ms }
  - name: deep
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 1000
    lease: { ttl: 2s, refresh: 200ms }
`

// newFarFixture is a one-node fixture on farRules with the allocator rtt
// away.
func newFarFixture(t *testing.T, rtt time.Duration, configure func(*Config)) *fixture {
	t.Helper()
	var ft *farTransport
	f := newFixtureWith(t, func(c *Config) {
		tr := c.Transport.(*storeTransport)
		set, err := parseRules(farRules)
		if err != nil {
			t.Fatal(err)
		}
		tr.set = set
		ft = &farTransport{storeTransport: tr, clk: c.Clock.(*clock.Fake), rtt: rtt}
		c.Transport = ft
		if configure != nil {
			configure(c)
		}
	})
	f.far, f.set = ft, ft.set
	t.Cleanup(ft.releaseAll) // before the fixture's Close, which waits for calls
	return f
}

// drive offers rate tokens a second to the pool for d, one token per Take,
// in steps of 5ms, and returns how many it took.
func (f *fixture) drive(p *Pool, rate float64, d time.Duration) (took int64) {
	const by = 5 * time.Millisecond
	perStep := rate * by.Seconds()
	owed := 0.0
	f.settle()
	for elapsed := time.Duration(0); elapsed < d; elapsed += by {
		for owed += perStep; owed >= 1; owed-- {
			if _, ok := p.Take(1); ok {
				took++
			} else {
				p.Refused(1)
			}
		}
		f.clk.Advance(by)
		f.settle()
		f.far.deliver(f.clk.Now())
		f.settle()
	}
	return took
}

// With the allocator 400ms away and a burst of a tenth of a second, a node
// on tokens alone gets at most one burst per round trip; with a share of
// the rate it keeps the whole rate once its first lease has arrived.
func TestShareKeepsTheRateAtADistance(t *testing.T) {
	const rtt, T = 400 * time.Millisecond, 10 * time.Second
	run := func(tokensOnly bool) (took int64, ideal, bound float64) {
		f := newFarFixture(t, rtt, func(c *Config) { c.TokensOnly = tokensOnly })
		p := f.table("far").Pool("k")
		took = f.drive(p, 2000, T)
		r, _ := f.set.Get("far")
		// Nothing is admitted before the first answer (fallback is the
		// client's); after it, the burst and the rate.
		ideal = float64(r.Burst) + r.Rate()*(T-rtt).Seconds()
		bound = float64(r.Burst) + r.Rate()*(T+r.Lease.TTL).Seconds()
		return took, ideal, bound
	}
	shares, ideal, bound := run(false)
	tokens, _, _ := run(true)
	t.Logf("400ms away, 2x load for 10s: shares admitted %d (%.3f of %.0f), tokens only %d (%.3f)",
		shares, float64(shares)/ideal, ideal, tokens, float64(tokens)/ideal)
	if float64(shares) < 0.97*ideal || float64(shares) > bound {
		t.Fatalf("with rate shares the node admitted %d, want at least 97%% of %.0f and at most %.0f", shares, ideal, bound)
	}
	if float64(tokens) > 0.5*ideal {
		t.Fatalf("tokens alone admitted %d, more than half of %.0f: the test no longer shows the distance problem", tokens, ideal)
	}
}

// A renewal leaves early enough for its round trip: with the allocator
// 900ms away and a 2s lease, the share never lapses, even on a rule whose
// refresh interval (1.5s) would leave too late; at 1.2s, more than half the
// TTL, the rule is reported once.
func TestShareRenewedAheadOfItsRoundTrip(t *testing.T) {
	f := newFarFixture(t, 900*time.Millisecond, nil)
	p := f.table("lazy").Pool("k")
	f.drive(p, 2000, time.Second) // the first answer arrives at 900ms
	if !p.Sharing() {
		t.Fatal("no share after the first answer")
	}
	const by = 5 * time.Millisecond
	for elapsed := time.Duration(0); elapsed < 8*time.Second; elapsed += by {
		p.Take(1)
		p.Refused(10)
		f.clk.Advance(by)
		f.settle()
		f.far.deliver(f.clk.Now())
		f.settle()
		if !p.Sharing() {
			t.Fatalf("the share lapsed %v into the run: its renewal did not come back in time", elapsed)
		}
	}

	var logs bytes.Buffer
	g := newFarFixture(t, 1200*time.Millisecond, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	g.drive(g.table("far").Pool("k"), 2000, 6*time.Second)
	if n := strings.Count(logs.String(), "lease.ttl is shorter than two round trips"); n != 1 {
		t.Fatalf("%d warnings about the TTL at a 1.2s round trip, want exactly 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "round_trip=1.2s") {
		t.Fatalf("the warning does not give the round trip:\n%s", logs.String())
	}
}

// What a share earns beyond the pool's cap goes back to the allocator with
// the next request instead of being lost.
func TestShareOverflowIsGivenBack(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	p := f.table("far").Pool("k")
	// Busy before its first request leaves, the key asks for a share of
	// the whole rate (one node); it then uses a tenth of it, so most of what
	// the share earns overflows until the renewal follows the demand down.
	p.Refused(1)
	p.Refused(1)
	f.drive(p, 100, time.Second)
	if got := f.tr.returned.Load(); got < 100 {
		t.Fatalf("%d tokens given back with Acquires, want the overflow of a share of 1000/s used at 100/s", got)
	}
	if n := p.Tokens(); n > 100 {
		t.Fatalf("the pool holds %d tokens, more than its cap of a tenth of a second of its share", n)
	}
}

// A key that goes quiet gives its share back within a few sweeps: another
// holder can then have the whole rate.
func TestShareGivenBackWhenQuiet(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	r, _ := f.set.Get("far")
	f.tr.acquireAs(t, "n2", r, "k", 1) // another holder, to give it back to
	p := f.table("far").Pool("k")
	f.drive(p, 1500, time.Second)
	if p.Holders() < 2 {
		t.Fatalf("the node sees %d holders, want 2", p.Holders())
	}
	if !p.Sharing() {
		t.Fatal("no share while busy")
	}
	f.step(60*time.Millisecond, 5*time.Millisecond) // a few sweeps of silence
	if p.Sharing() {
		t.Fatal("the share is still held 60ms after the key went quiet")
	}
	if l := f.tr.acquireAs(t, "n2", r, "k", r.Rate()); l.Rate != r.Rate() {
		t.Fatalf("another node got a share of %g/s after the first went quiet, want the whole %g/s", l.Rate, r.Rate())
	}
}

// A quiet key that is its share's only holder does not renew it and leaves
// at its idle check; its Release ends the share in the allocator, so a node
// that asks later has the whole rate.
func TestSoleHolderShareEndsWhenItLeaves(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	tb := f.table("far")
	p := tb.Pool("k")
	f.drive(p, 1500, time.Second)
	if !p.Sharing() || p.Holders() != 1 {
		t.Fatalf("sharing %v with %d holders while busy, want a share held alone", p.Sharing(), p.Holders())
	}
	before := len(f.tr.calls())
	f.step(1500*time.Millisecond, 10*time.Millisecond)
	if n := tb.Len(); n != 0 {
		t.Fatal("the quiet key is still on the node 1.5s after its last use")
	}
	if n := len(f.tr.calls()) - before; n > 1 {
		t.Fatalf("%d Acquires while quiet, want at most the one reporting what the last busy moment took: the share lapses rather than renews", n)
	}
	r, _ := f.set.Get("far")
	if l := f.tr.acquireAs(t, "n2", r, "k", r.Rate()); l.Rate != r.Rate() {
		t.Fatalf("another node got a share of %g/s after the first left, want the whole %g/s", l.Rate, r.Rate())
	}
}

// During an outage a node keeps the share it was lent until the lease ends,
// and only then has none.
func TestShareOutlivesAnOutage(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	p := f.table("far").Pool("k")
	f.drive(p, 1500, 500*time.Millisecond)
	f.tr.down.Store(true)
	took := f.drive(p, 1500, time.Second)
	if !p.Sharing() {
		t.Fatal("the share ended within a second of the outage, before its 2s lease")
	}
	if took < 900 {
		t.Fatalf("took %d in the first second of the outage, want about the 1000 of the share", took)
	}
	f.drive(p, 1500, 1500*time.Millisecond)
	if p.Sharing() {
		t.Fatal("the share outlived its lease")
	}
}

// Near the allocator, a key whose demand is under the rule's rate lives on
// leases of tokens and gives back the share its first lease brought (it
// was refused before that lease, so it asked for one); a key above the
// rate keeps its share. Both admit what they may.
func TestTokensSufficeBelowTheRate(t *testing.T) {
	const T = 3 * time.Second
	for _, c := range []struct {
		name  string
		rate  float64
		share bool
	}{{"200/s", 200, false}, {"1500/s", 1500, true}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFarFixture(t, 10*time.Millisecond, nil)
			p := f.table("far").Pool("k")
			took := f.drive(p, c.rate, T)
			if p.Sharing() != c.share {
				t.Fatalf("after %v at %s the key holds a share: %v, want %v", T, c.name, p.Sharing(), c.share)
			}
			r, _ := f.set.Get("far")
			want := min(c.rate, r.Rate()) * (T - 10*time.Millisecond).Seconds() // none before the first answer
			if float64(took) < 0.97*want {
				t.Fatalf("took %d at %s, want at least 97%% of %.0f", took, c.name, want)
			}
		})
	}
}
