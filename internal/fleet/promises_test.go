package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

// What a user is promised of a real fleet under stress and in a key's
// first moments (the simulator's TestSaturated, TestChurn,
// TestFreshKeyBurst and TestStampede, here on real processes).

// Nodes whose callers saturate their CPUs: four goroutines per node spin
// on Allow at a paced 50x overload, 32 spinning callers on this machine's
// two cores, so that every node's lease loop and RPCs wait for a CPU as
// their callers' work takes them. The fleet keeps 95% of the ideal, within
// the bounds. 8 s: the cold start 10 ms away is a few hundredths of it,
// and every lease renews some 40 times.
func TestSaturated(t *testing.T) {
	if testing.Short() {
		t.Skip("8s fleet run")
	}
	f := newFleet(t, spec{rule: tokenBucket(1000, 100), roundTrip: 10 * time.Millisecond})
	l := uniform(f.rule, 50)
	l.callers, l.spin = 4, true
	r := f.run(8*time.Second, l)
	got := r.report(t, "32 callers spinning at 50x")
	r.checkBounds(t)
	if got < 0.95 {
		t.Errorf("admitted/ideal %.4f, want at least 0.95", got)
	}
}

// A node is replaced every second, in turn (closed, then a new client with
// a new id in its place, as a rolling deployment does), under a paced load
// of twice the rate: the fleet keeps 95% of the ideal, within the bounds.
// 12 s: eleven replacements, each node's slot replaced once or twice, and
// the cold start 10 ms away a few hundredths of the run.
func TestChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("12s fleet run")
	}
	t.Parallel()
	takeTurn(t)
	f := newFleet(t, spec{rule: tokenBucket(1000, 100), roundTrip: 10 * time.Millisecond})
	const length = 12 * time.Second
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; i < int(length/time.Second)-1; i++ {
			<-tick.C
			if err = f.replace(i % len(f.slots)); err != nil {
				return
			}
		}
	}()
	r := f.run(length, uniform(f.rule, 2))
	if err := <-done; err != nil {
		t.Fatalf("replacing a node: %v", err)
	}
	got := r.report(t, fmt.Sprintf("a node replaced every second, %d nodes in all", f.gen))
	r.checkBounds(t)
	if got < 0.95 {
		t.Errorf("admitted/ideal %.4f, want at least 0.95", got)
	}
}

// One node, a fresh key of burst 200 (1000 a minute), asked once a
// millisecond: at least 190 of the first 200 pass. The centre holds the
// whole burst and nothing else spends it; the key's first request waits
// for its first lease (a round trip), and its leases must then grow as
// fast as it asks. The round trip is the simulator's, 1 ms. It runs alone:
// a millisecond's pace is what other fleets' load would disturb.
func TestFreshKeyBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet run")
	}
	f := newFleet(t, spec{nodes: 1, roundTrip: time.Millisecond, rule: `  - name: r
    algorithm: token_bucket
    limit: 1000
    period: 1m
    burst: 200
`})
	n := f.slots[0].c
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	admitted, modes := 0, map[client.Mode]int{}
	start := time.Now()
	for range 200 {
		<-tick.C
		d, err := n.AllowN(context.Background(), f.rule.Name, "fresh", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
			modes[d.Mode]++
		}
	}
	t.Logf("%d of the first 200 admitted, asked 1 ms apart (over %v); admitted by mode %v",
		admitted, time.Since(start).Round(time.Millisecond), modes)
	if admitted < 190 {
		// (195 in three runs beside a simulator sweep; 188-190 before a key
		// whose share is a trickle asked ahead when it ran low. The
		// simulator's TestFreshKeyBurst holds it on a clock of its own.)
		t.Errorf("%d of the first 200 admitted, want at least 190", admitted)
	}
}

// The classic concurrency test, through the SDK: 1,000 requests at once
// (125 on each of 8 nodes) on a fresh key of 100 an hour, with and without
// the fleet's size configured. At most 100 pass, counting what passes in
// the 2 s after, while every node keeps asking (the rule makes a tenth of
// a token meanwhile): a cold fleet waits for the store's say.
func TestStampede(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet run")
	}
	t.Parallel()
	for _, configured := range []bool{false, true} {
		t.Run(fmt.Sprintf("configured=%v", configured), func(t *testing.T) {
			t.Parallel()
			takeTurn(t)
			f := newFleet(t, spec{configured: configured, roundTrip: 10 * time.Millisecond, rule: `  - name: r
    algorithm: token_bucket
    limit: 100
    period: 1h
    burst: 100
`})
			ctx := context.Background()
			var stampede, after, fallback atomic.Int64
			perNode := make([]atomic.Int64, len(f.slots))
			allow := func(i int, passed *atomic.Int64) {
				d, err := f.slots[i].c.AllowN(ctx, f.rule.Name, "fresh", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Mode == client.ModeFallback {
					fallback.Add(1)
				}
				if d.Allowed {
					passed.Add(1)
					perNode[i].Add(1)
				}
			}
			go1 := make(chan struct{})
			var wg sync.WaitGroup
			for i := range f.slots {
				for range 1000 / len(f.slots) {
					wg.Go(func() {
						<-go1
						allow(i, &stampede)
					})
				}
			}
			close(go1)
			wg.Wait()
			// The 2 s after: each node asks every 10 ms.
			end := time.Now().Add(2 * time.Second)
			for i := range f.slots {
				wg.Go(func() {
					for time.Now().Before(end) {
						allow(i, &after)
						time.Sleep(10 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			per := make([]int64, len(perNode))
			for i := range perNode {
				per[i] = perNode[i].Load()
			}
			total := stampede.Load() + after.Load()
			t.Logf("configured=%v: %d of 1,000 at once passed, %d in the 2 s after: %d in all; per node %v; fallback decisions %d",
				configured, stampede.Load(), after.Load(), total, per, fallback.Load())
			if total > 100 {
				t.Errorf("%d passed on a key of 100 an hour, want at most 100", total)
			}
		})
	}
}
