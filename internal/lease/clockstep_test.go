package lease

import (
	"testing"
	"time"
)

// The manager measures everything on the monotonic clock: a step of the
// wall clock, either way, moves no refill and forgives no debt. Before,
// notBefore and consumedSince were wall-clock instants: a step back of 30s
// held every refill for 30s, and a step forward made fallback consumption
// look 30s old, so the allocator forgave it.
func TestWallClockStepsMoveNothing(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.TokensOnly = true })
	r, _ := f.set.Get("day")
	p := f.table("day").Pool("k")
	f.step(2*time.Millisecond, time.Millisecond)
	// Empty the central bucket, so the next refill falls short and waits.
	if _, err := f.st.Check(t.Context(), r, "k", r.Capacity()-100); err != nil {
		t.Fatal(err)
	}
	p.Take(p.Tokens())
	f.step(20*time.Millisecond, 10*time.Millisecond) // a refill that gets nothing: the next one waits up to a TTL
	if wait := p.RetryIn(); wait <= 0 || wait > 2*time.Second {
		t.Fatalf("retry in %v after a short grant, want up to 1.25 TTL", wait)
	}
	calls := len(f.tr.calls())
	f.clk.StepWall(-30 * time.Second)
	if wait := p.RetryIn(); wait > 2*time.Second {
		t.Fatalf("retry in %v after the wall clock stepped back 30s: the step moved the refill", wait)
	}
	p.Refused(1)
	f.step(1500*time.Millisecond, 10*time.Millisecond)
	if len(f.tr.calls()) == calls {
		t.Fatal("no refill within 1.5s of a 30s step back of the wall clock")
	}

	// Fallback consumption keeps its true age across a step forward.
	q := f.table("day").Pool("q")
	q.Consumed(5)
	f.clk.StepWall(30 * time.Second)
	f.step(5*time.Millisecond, time.Millisecond)
	f.tr.mu.Lock()
	last := f.tr.last
	f.tr.mu.Unlock()
	for _, req := range last {
		if req.Key == "q" && req.Consumed == 5 {
			if req.ConsumedAge > time.Second {
				t.Fatalf("consumption 5ms old reported %v old after the wall clock stepped forward 30s", req.ConsumedAge)
			}
			return
		}
	}
	t.Fatalf("the consumption of q was not reported: %+v", last)
}

// A starved key stays served while the allocator is up: its next Acquire
// leaves before its lease ends, whatever the retry's jitter. Before, the
// wait was capped at the TTL and then jittered by 0.75-1.25, so about half
// of the retries left after the lease had ended, and the key was taken for
// a new one until the answer came.
func TestStarvedKeysStayServed(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.TokensOnly = true })
	r, _ := f.set.Get("day") // 100,000 a day: an empty bucket takes longer than the 1s TTL to give anything
	tb := f.table("day")
	var pools []*Pool
	for i := range 40 {
		p := tb.Pool(string(rune('a' + i)))
		pools = append(pools, p)
	}
	f.step(2*time.Millisecond, time.Millisecond)
	for i := range 40 { // empty every key's central bucket: its first lease took 100
		if d, err := f.st.Check(t.Context(), r, string(rune('a'+i)), r.Capacity()-100); err != nil || !d.Allowed {
			t.Fatalf("draining key %d: %+v, %v", i, d, err)
		}
	}
	served, total := 0, 0
	for step := 0; step < 500; step++ { // 5s in steps of 10ms, every key refused all along
		for _, p := range pools {
			p.Take(p.Tokens())
			p.Refused(10)
			total++
			if p.Served() {
				served++
			}
		}
		f.clk.Advance(10 * time.Millisecond)
		f.settle()
	}
	if served != total {
		t.Fatalf("starved keys were unserved %.1f%% of the time with the allocator up", 100*float64(total-served)/float64(total))
	}
}
