package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// A share of the drawn scenarios add a concurrency rule, "c", beside
// their others, with callers that take a slot and hold it 20-80 ms (or up
// to 400 ms, within max_hold) at several times what the limit serves. The
// draw is of its own randomness (slotSalt), so that a scenario without one
// is the one it was before they existed; the salt is one that picks none
// of the regression seeds (sim_test.go), which keep the runs they failed.

// slotShare is one in slotShare of the seeds.
const (
	slotShare = 10
	slotSalt  = 0xc0c0 + 264
)

func drawSlots(seed uint64, s *Scenario) {
	if !slotsDrawn(seed) {
		return
	}
	rng := rand.New(rand.NewPCG(seed, slotSalt))
	r := rules.Rule{Name: "c", Algorithm: rules.Concurrency, Failure: rules.FailOpen, Limit: pick[int64](rng, 4, 8, 20, 20, 50)}
	if rng.IntN(5) == 0 {
		r.Failure = rules.FailClosed
	}
	ttl := pick(rng, time.Second, 2*time.Second, 4*time.Second)
	if rtt := 2 * (s.Link.OneWay + s.Link.Jitter); ttl < 4*rtt {
		ttl = 4 * rtt
	}
	r.Lease.TTL = ttl
	if rng.IntN(3) == 0 {
		r.MaxHold = 400 * time.Millisecond
	}
	if err := r.Normalize(); err != nil {
		panic(fmt.Sprintf("sim: rule %+v: %v", r, err))
	}
	list := []rules.Rule{r}
	for _, o := range s.Rules.Rules() {
		list = append(list, *o)
	}
	set, err := rules.NewSet(list)
	if err != nil {
		panic(fmt.Sprintf("sim: rules: %v", err))
	}
	s.Rules = set
	l := &s.Load
	l.holdMin, l.holdMax = 20*time.Millisecond, 80*time.Millisecond
	if rng.IntN(4) == 0 {
		l.holdMax = min(r.MaxHold, 400*time.Millisecond)
	}
	mult := pick(rng, 2.0, 5, 10)
	mean := (l.holdMin + l.holdMax).Seconds() / 2
	keys := pick(rng, 1, 1, 3)
	rate := min(mult*float64(r.Limit)/mean, 5000/float64(keys)) // a key's takes per second, fleet-wide
	skew := rng.IntN(3) == 0
	for k := range keys {
		for i := range s.Nodes {
			share := 1 / float64(s.Nodes)
			if skew && s.Nodes > 1 {
				share = map[bool]float64{true: 0.8, false: 0.2 / float64(s.Nodes-1)}[i == 0]
			}
			l.streams = append(l.streams, &stream{node: i, rule: r.Name, key: fmt.Sprintf("s%d", k),
				rate: rate * share, cost: 1, to: s.Length})
		}
	}
	kind := "concurrency"
	if r.Failure == rules.FailClosed {
		kind += "-closed"
	}
	s.label(kind, "(c: %d in flight ttl %v max_hold %v, held %v-%v, x%g over %d keys, skew %v)",
		r.Limit, r.Lease.TTL, r.MaxHold, l.holdMin, l.holdMax, mult, keys, skew)
}

// slotsDrawn says whether seed's scenario has a concurrency rule.
func slotsDrawn(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, slotSalt^0x5107)).IntN(slotShare) == 0
}
