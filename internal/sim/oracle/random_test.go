package oracle

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The incremental checks against brute force over random histories: the
// same verdict on every admission, and the same worst excess.

const ms = time.Millisecond

func randomBucket(rng *rand.Rand) Rule {
	r, _ := Rule{Name: "r", Algorithm: TokenBucket, Limit: 1 + rng.Int64N(50),
		Period: time.Duration(1+rng.IntN(20)) * 100 * ms, Burst: 1 + rng.Int64N(60),
		TTL: time.Duration(1+rng.IntN(100)) * 10 * ms}.normalize()
	return r
}

type histAdm struct {
	t        time.Duration
	cost     int64
	vlo, cur int
}

// bruteRate is the worst excess A[t_i, t_m] − bound over every instant t_i
// ≤ t_m, the bound's terms the largest among versions vlo(t_i)..cur(m); ok
// when no window exceeds.
func bruteRate(rs *ruleState, perNode int, h []histAdm) (ok bool, excess float64) {
	m := len(h) - 1
	ok, excess = true, math.Inf(-1)
	var a int64
	for i := m; i >= 0; i-- {
		a += h[i].cost
		if i > 0 && h[i-1].t == h[i].t {
			continue // not the instant's first admission
		}
		p := rs.rateParams(h[i].vlo, perNode)
		for v := h[i].vlo + 1; v <= h[m].cur; v++ {
			p = p.max(rs.rateParams(v, perNode))
		}
		bd := p.b + p.r*(float64(h[m].t-h[i].t)+p.l)
		if exceeds(float64(a), bd) {
			ok = false
		}
		excess = max(excess, float64(a)-bd)
	}
	return ok, excess
}

func TestRateBoundMatchesBruteForce(t *testing.T) {
	violations := 0
	for seed := range 400 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		rs := &ruleState{}
		rs.set(0, randomBucket(rng))
		perNode := 0
		if seed%3 == 0 {
			perNode = 1 + rng.IntN(5)
		}
		gap := 1 + rng.IntN(300) // the mean step between instants, in ms
		var rb rateBound
		var h []histAdm
		now := time.Duration(0)
		for i := range 150 {
			if rng.IntN(4) != 0 {
				now += time.Duration(rng.IntN(2*gap)) * ms
			}
			if rng.IntN(20) == 0 {
				rs.set(now, randomBucket(rng))
			}
			cost := 1 + rng.Int64N(6)
			vlo := rs.lookback(now)
			got := rb.admit(rs, perNode, float64(now), cost, vlo)
			h = append(h, histAdm{t: now, cost: cost, vlo: vlo, cur: len(rs.vers) - 1})
			ok, excess := bruteRate(rs, perNode, h)
			if got.ok != ok {
				t.Fatalf("seed %d admission %d at %v: incremental ok=%v, brute force ok=%v (excess %g)", seed, i, now, got.ok, ok, excess)
			}
			if !ok {
				violations++
				if e := got.measured - got.boundVal; math.Abs(e-excess) > 1e-6*max(1, math.Abs(excess)) {
					t.Fatalf("seed %d admission %d: worst excess %g, brute force %g", seed, i, e, excess)
				}
			}
		}
	}
	if violations < 1000 {
		t.Fatalf("only %d violating admissions: the histories do not test much", violations)
	}
}

type histPt struct {
	x time.Duration
	c int64
	v int
}

// bruteWindow is the worst excess over every window (z − w, z] (or
// [z − w, z]) ending at a point z and holding the last point x.
func bruteWindow(s *windowSum, pts []histPt) (ok bool, excess float64) {
	x := pts[len(pts)-1].x
	ok, excess = true, math.Inf(-1)
	for _, z := range pts {
		if z.x < x || !s.in(x, z.x) {
			continue
		}
		var sum int64
		v := math.MaxInt
		for _, p := range pts {
			if p.x <= z.x && s.in(p.x, z.x) {
				sum += p.c
				v = min(v, p.v)
			}
		}
		bd := s.rs.bound(s.kind, v, s.n)
		if exceeds(float64(sum), bd) {
			ok = false
		}
		excess = max(excess, float64(sum)-bd)
	}
	return ok, excess
}

func TestWindowSumMatchesBruteForce(t *testing.T) {
	violations, back := 0, 0
	for seed := range 300 {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		rule := func() Rule {
			r, _ := Rule{Name: "r", Algorithm: SlidingLog, Limit: 1 + rng.Int64N(12), Period: time.Second,
				TTL: time.Duration(1+rng.IntN(50)) * 10 * ms}.normalize()
			return r
		}
		rs := &ruleState{}
		rs.set(0, rule())
		s := newWindowSum(rs, boundLimit, 1, time.Second, time.Hour, windowEnds(seed%2 == 0))
		gap := 1 + rng.IntN(200)
		var pts []histPt
		now, x := time.Duration(0), time.Duration(0)
		for i := range 150 {
			step := time.Duration(rng.IntN(2*gap)) * ms
			now += step
			x += step
			if rng.IntN(10) == 0 {
				x -= time.Duration(rng.IntN(1500)) * ms // the store's clock steps back
			}
			if rng.IntN(20) == 0 {
				rs.set(now, rule())
			}
			v := rs.lookback(now)
			c := 1 + rng.Int64N(3)
			if len(pts) > 0 && x < pts[len(pts)-1].x {
				back++
			}
			got := s.add(x, c, v)
			pts = append(pts, histPt{x: x, c: c, v: v})
			ok, excess := bruteWindow(s, pts)
			if got.ok != ok {
				t.Fatalf("seed %d point %d at %v: incremental ok=%v, brute force ok=%v (excess %g)", seed, i, x, got.ok, ok, excess)
			}
			if !ok {
				violations++
				if e := float64(got.sum) - got.bound; math.Abs(e-excess) > 1e-9 {
					t.Fatalf("seed %d point %d: worst excess %g, brute force %g", seed, i, e, excess)
				}
			}
		}
	}
	if violations < 1000 || back < 1000 {
		t.Fatalf("only %d violations and %d steps back: the histories do not test much", violations, back)
	}
}

// TestCentralLimiterPasses: what an exact central limiter admits breaks no
// bound, over random loads and reloads (a bucket carries its tokens over a
// reload, capped at the new burst).
func TestCentralLimiterPasses(t *testing.T) {
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 13))
		alg := []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog}[seed%4]
		rule := func() Rule {
			r := Rule{Name: "r", Algorithm: alg, Limit: 1 + rng.Int64N(40), Period: time.Second,
				TTL: time.Duration(1+rng.IntN(100)) * 10 * ms}
			if alg == TokenBucket {
				r.Period, r.Burst = time.Duration(1+rng.IntN(20))*100*ms, 1+rng.Int64N(60)
			}
			return r
		}
		o := New(Config{Nodes: 3})
		r := rule()
		o.SetRule(0, r)
		tokens, last := float64(r.Burst), time.Duration(0)
		if r.Burst == 0 {
			tokens = float64(r.Limit)
		}
		var admitted []histPt // (time, cost) of what the central limiter let through
		now := time.Duration(0)
		for range 400 {
			now += time.Duration(rng.IntN(60)) * ms
			if alg == TokenBucket && rng.IntN(40) == 0 {
				r = rule()
				o.SetRule(now, r)
			}
			cost := 1 + rng.Int64N(3)
			ok := false
			switch alg {
			case TokenBucket:
				b := float64(max(r.Burst, 1))
				tokens = min(b, tokens+float64(r.Limit)/r.Period.Seconds()*(now-last).Seconds())
				last = now
				if ok = tokens >= float64(cost); ok {
					tokens -= float64(cost)
				}
			case FixedWindow, SlidingWindow, SlidingLog:
				var in int64
				for _, p := range admitted {
					if (alg == SlidingLog && p.x > now-r.Period) || (alg != SlidingLog && p.x/r.Period == now/r.Period) {
						in += p.c
					}
				}
				ok = in+cost <= r.Limit
			}
			if ok {
				admitted = append(admitted, histPt{x: now, c: cost})
				o.Admitted(now, now, rng.IntN(3), "r", "k", cost, Strict)
			}
		}
		if v := o.Violations(); len(v) > 0 {
			t.Fatalf("seed %d (%v): %v", seed, alg, v[0])
		}
	}
}
