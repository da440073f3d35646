package bucket_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

// This file holds deliberately simple reference models of the algorithms:
// exact rationals instead of scaled integers, plain lists instead of rings
// and counters, and brute-force searches instead of formulas. The property
// tests drive a model and the real limiter with the same random requests
// and demand identical decisions, field by field.

// model is a reference algorithm. peek decides at instant t (Unix ns) as if
// the request were spent when allowed; spend then spends it.
type model interface {
	peek(t, n int64) bucket.Decision
	spend(n int64)
	ceiling() int64
}

// decide is AllowN for a model.
func decide(m model, t, n int64) (bucket.Decision, error) {
	if n <= 0 {
		return bucket.Decision{}, bucket.ErrInvalidCost
	}
	if n > m.ceiling() {
		return bucket.Decision{}, bucket.ErrCostAboveCapacity
	}
	d := m.peek(t, n)
	if d.Allowed {
		m.spend(n)
	}
	return d, nil
}

// compare runs one request on both and fails on any difference.
func compare(t *testing.T, what string, l bucket.Limiter, m model, at, n int64) (bucket.Decision, error) {
	t.Helper()
	got, gotErr := l.AllowN(time.Unix(0, at), n)
	want, wantErr := decide(m, at, n)
	if gotErr != wantErr || (gotErr == nil && got != want) {
		t.Fatalf("%s: AllowN(%d, %d)\n got %+v, %v\nwant %+v, %v", what, at, n, got, gotErr, want, wantErr)
	}
	return got, gotErr
}

// --- token bucket: exact rationals, stepped from instant to instant ---

type tokenModel struct {
	capacity int64
	rate     *big.Rat // tokens per nanosecond; 0 for a deposit-only bucket
	tokens   *big.Rat
	last     *big.Int // latest instant seen
}

func newTokenModel(capacity int64, rate *big.Rat, now int64, full bool) *tokenModel {
	m := &tokenModel{capacity: capacity, rate: rate, tokens: new(big.Rat), last: big.NewInt(now)}
	if full {
		m.tokens.SetInt64(capacity)
	}
	return m
}

func (m *tokenModel) ceiling() int64 { return m.capacity }

func (m *tokenModel) peek(t, n int64) bucket.Decision {
	at := big.NewInt(t)
	if at.Cmp(m.last) > 0 {
		elapsed := new(big.Rat).SetInt(new(big.Int).Sub(at, m.last))
		m.tokens.Add(m.tokens, elapsed.Mul(elapsed, m.rate))
		m.tokens = minRat(m.tokens, ratOf(m.capacity))
		m.last = at
	}
	lag := new(big.Int).Sub(m.last, at)
	d := bucket.Decision{Limit: m.capacity}
	if m.tokens.Cmp(ratOf(n)) >= 0 {
		after := new(big.Rat).Sub(m.tokens, ratOf(n))
		d.Allowed = true
		d.Remaining = floorRat(after)
		d.ResetAfter = m.wait(lag, new(big.Rat).Sub(ratOf(m.capacity), after))
		return d
	}
	d.Remaining = floorRat(m.tokens)
	d.RetryAfter = m.wait(lag, new(big.Rat).Sub(ratOf(n), m.tokens))
	d.ResetAfter = m.wait(lag, new(big.Rat).Sub(ratOf(m.capacity), m.tokens))
	return d
}

// wait is lag plus the time to gain missing tokens, rounded up to the
// nanosecond and capped at the largest Duration.
func (m *tokenModel) wait(lag *big.Int, missing *big.Rat) time.Duration {
	if missing.Sign() <= 0 || m.rate.Sign() == 0 {
		return 0
	}
	ns := ceilRat(new(big.Rat).Quo(missing, m.rate))
	return capDuration(ns.Add(ns, lag))
}

func (m *tokenModel) spend(n int64) { m.tokens.Sub(m.tokens, ratOf(n)) }

func (m *tokenModel) deposit(n int64) int64 {
	if n <= 0 {
		return 0
	}
	room := m.capacity - floorRat(m.tokens)
	m.tokens = minRat(m.tokens.Add(m.tokens, ratOf(n)), ratOf(m.capacity))
	return min(n, room)
}

func (m *tokenModel) drain() int64 {
	whole := floorRat(m.tokens)
	m.tokens.Sub(m.tokens, ratOf(whole))
	return whole
}

// --- windows: a plain list of admissions, counted by brute force, in
// small integers (windows of a few dozen nanoseconds) ---

// admission is one admitted request, stamped with the latest instant seen.
type admission struct{ at, n int64 }

type windowModel struct {
	kind     string // "fixed", "log" or "sliding"
	limit    int64
	window   int64
	seen     int64 // latest instant seen
	admitted []admission
}

// newWindowModel mirrors the constructors: only the fixed window is told
// the time when it is made.
func newWindowModel(kind string, limit, window, start int64) *windowModel {
	m := &windowModel{kind: kind, limit: limit, window: window, seen: math.MinInt64}
	if kind == "fixed" {
		m.seen = start
	}
	return m
}

func (m *windowModel) ceiling() int64 { return m.limit }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// load is the algorithm's measure of what is spent at instant at, times
// the window (so that it is a whole number), counting extra tokens as
// admitted at seen: the count in the window (fixed), in the last
// window-long span (log), or the weighted estimate
// previous × (window - elapsed)/window + current (sliding).
func (m *windowModel) load(at, extra int64) int64 {
	win := func(t int64) int64 { return floorDiv(t, m.window) }
	var curr, prev int64
	add := func(a admission) {
		switch {
		case m.kind == "log" && at-a.at < m.window, m.kind != "log" && win(a.at) == win(at):
			curr += a.n
		case m.kind == "sliding" && win(a.at) == win(at)-1:
			prev += a.n
		}
	}
	for _, a := range m.admitted {
		add(a)
	}
	add(admission{m.seen, extra})
	elapsed := at - win(at)*m.window
	return curr*m.window + prev*(m.window-elapsed)
}

func (m *windowModel) peek(t, n int64) bucket.Decision {
	m.seen = max(m.seen, t)
	// Admissions three windows old weigh nothing any more; forget them.
	for len(m.admitted) > 0 && m.seen-m.admitted[0].at >= 3*m.window {
		m.admitted = m.admitted[1:]
	}
	room := m.limit*m.window - m.load(m.seen, 0) // times the window
	d := bucket.Decision{Limit: m.limit, Remaining: max(0, floorDiv(room, m.window))}
	fits := func(at int64) bool { return m.load(at, 0) <= (m.limit-n)*m.window }
	empty := func(extra int64) func(int64) bool {
		return func(at int64) bool { return m.load(at, extra) == 0 }
	}
	if room >= n*m.window {
		d.Allowed = true
		d.Remaining = floorDiv(room, m.window) - n
		d.ResetAfter = m.firstFrom(t, empty(n))
	} else {
		d.RetryAfter = m.firstFrom(t, fits)
		d.ResetAfter = m.firstFrom(t, empty(0))
	}
	if m.kind == "fixed" { // a fixed window reports its end, full or not
		d.ResetAfter = time.Duration((floorDiv(m.seen, m.window)+1)*m.window - t)
	}
	return d
}

// firstFrom searches nanosecond by nanosecond from seen for the first
// instant at which ok holds, and returns how long after t that is.
func (m *windowModel) firstFrom(t int64, ok func(int64) bool) time.Duration {
	for at := m.seen; at <= m.seen+3*m.window; at++ {
		if ok(at) {
			return time.Duration(at - t)
		}
	}
	panic("model: no instant within three windows")
}

func (m *windowModel) spend(n int64) { m.admitted = append(m.admitted, admission{m.seen, n}) }

// --- helpers for rationals ---

func ratOf(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func minRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return new(big.Rat).Set(b)
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q.Int64()
}

func ceilRat(r *big.Rat) *big.Int {
	neg := new(big.Rat).Neg(r)
	q := new(big.Int).Div(neg.Num(), neg.Denom())
	return q.Neg(q)
}

func capDuration(ns *big.Int) time.Duration {
	if ns.Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return math.MaxInt64
	}
	return time.Duration(ns.Int64())
}

// --- random request sequences ---

// walk produces instants: mostly forward by up to a few steps of scale,
// sometimes standing still, sometimes a little backwards.
type walk struct {
	r     *rand.Rand
	at    int64
	scale int64
}

func (w *walk) next() int64 {
	switch p := w.r.IntN(10); {
	case p < 3: // stand still
	case p < 4:
		w.at -= w.r.Int64N(w.scale + 1)
	case p < 9:
		w.at += w.r.Int64N(w.scale + 1)
	default:
		w.at += w.r.Int64N(4*w.scale + 1)
	}
	return w.at
}

// cost is mostly valid, sometimes 0 or above the ceiling.
func cost(r *rand.Rand, ceiling int64) int64 {
	switch r.IntN(20) {
	case 0:
		return 0
	case 1:
		return ceiling + 1
	}
	return 1 + r.Int64N(min(ceiling, 1+r.Int64N(4)))
}

func TestTokenBucketMatchesModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		capacity, tokens, per := 1+r.Int64N(20), 1+r.Int64N(10), 1+r.Int64N(50)
		start := r.Int64N(1<<40) - 1<<39
		b, err := bucket.NewTokenBucketPer(capacity, tokens, time.Duration(per), time.Unix(0, start))
		if err != nil {
			t.Fatal(err)
		}
		m := newTokenModel(capacity, big.NewRat(tokens, per), start, true)
		w := &walk{r: r, at: start, scale: per * 2 / tokens}
		for range 500 {
			playTokenOp(t, r, b, m, w.next())
		}
	}
}

// Rates given as floats that are fractions p/q per second, as rules in
// "1000 per minute" style produce: the bucket must read them exactly.
func TestTokenBucketFloatRateMatchesModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	denominators := []int64{1, 2, 3, 4, 6, 7, 10, 60, 3600, 86400}
	for range 300 {
		p, q := 1+r.Int64N(5000), denominators[r.IntN(len(denominators))]
		capacity := 1 + r.Int64N(20)
		start := t0.UnixNano() + r.Int64N(int64(time.Hour))
		b := newTokenBucket(t, capacity, float64(p)/float64(q), time.Unix(0, start))
		m := newTokenModel(capacity, big.NewRat(p, q*int64(time.Second)), start, true)
		w := &walk{r: r, at: start, scale: q * int64(time.Second) / p}
		for range 300 {
			playTokenOp(t, r, b, m, w.next())
		}
	}
}

func TestLeasedBucketMatchesModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		capacity := 1 + r.Int64N(20)
		b, err := bucket.NewLeasedBucket(capacity)
		if err != nil {
			t.Fatal(err)
		}
		m := newTokenModel(capacity, new(big.Rat), math.MinInt64, false)
		w := &walk{r: r, at: r.Int64N(1 << 40), scale: 1000}
		for range 300 {
			playTokenOp(t, r, b, m, w.next())
		}
	}
}

// playTokenOp is one random operation on a bucket and its model: mostly a
// request, sometimes a deposit or a drain.
func playTokenOp(t *testing.T, r *rand.Rand, b *bucket.TokenBucket, m *tokenModel, at int64) {
	t.Helper()
	switch r.IntN(12) {
	case 0:
		n := r.Int64N(m.capacity+2) - 1
		if got, want := b.Deposit(n), m.deposit(n); got != want {
			t.Fatalf("Deposit(%d) = %d, model %d", n, got, want)
		}
	case 1:
		if got, want := b.Drain(), m.drain(); got != want {
			t.Fatalf("Drain() = %d, model %d", got, want)
		}
	default:
		compare(t, "token bucket", b, m, at, cost(r, m.capacity))
	}
}

func TestWindowsMatchModels(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for _, kind := range []string{"fixed", "log", "sliding"} {
		t.Run(kind, func(t *testing.T) {
			for range 300 {
				limit, window := 1+r.Int64N(12), 1+r.Int64N(40)
				start := r.Int64N(2000) - 1000 // straddles the epoch: negative instants too
				l := newWindowLimiter(t, kind, limit, window, start)
				m := newWindowModel(kind, limit, window, start)
				w := &walk{r: r, at: start, scale: window / 2}
				for range 300 {
					compare(t, kind, l, m, w.next(), cost(r, limit))
				}
			}
		})
	}
}

func newWindowLimiter(t *testing.T, kind string, limit, window, start int64) bucket.Limiter {
	t.Helper()
	var (
		l   bucket.Limiter
		err error
	)
	switch kind {
	case "fixed":
		l, err = bucket.NewFixedWindow(limit, time.Duration(window), time.Unix(0, start))
	case "log":
		l, err = bucket.NewSlidingLog(limit, time.Duration(window))
	default:
		l, err = bucket.NewSlidingWindow(limit, time.Duration(window))
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// multiModel is "every rule must allow; spend from all or none", with the
// combined decision spelled out the way the Multi documents it.
type multiModel []model

func (mm multiModel) ceiling() int64 {
	c := int64(math.MaxInt64)
	for _, m := range mm {
		c = min(c, m.ceiling())
	}
	return c
}

func (mm multiModel) peek(t, n int64) bucket.Decision {
	var ds []bucket.Decision
	for _, m := range mm {
		ds = append(ds, m.peek(t, n))
	}
	allowed := true
	for _, d := range ds {
		allowed = allowed && d.Allowed
	}
	best := ds[0]
	if allowed { // fewest left; on a tie, slowest to reset
		for _, d := range ds[1:] {
			if d.Remaining < best.Remaining || (d.Remaining == best.Remaining && d.ResetAfter > best.ResetAfter) {
				best = d
			}
		}
		return best
	}
	held := int64(math.MaxInt64)
	best = bucket.Decision{RetryAfter: -1}
	for _, d := range ds {
		h := d.Remaining
		if d.Allowed {
			h += n
		} else if d.RetryAfter > best.RetryAfter {
			best = d
		}
		held = min(held, h)
	}
	best.Remaining = held
	return best
}

func (mm multiModel) spend(n int64) {
	for _, m := range mm {
		m.spend(n)
	}
}

func TestMultiMatchesModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		start := r.Int64N(1000)
		capacity, tokens, per := 1+r.Int64N(10), 1+r.Int64N(5), 1+r.Int64N(30)
		tb, err := bucket.NewTokenBucketPer(capacity, tokens, time.Duration(per), time.Unix(0, start))
		if err != nil {
			t.Fatal(err)
		}
		var (
			limiters = []bucket.Limiter{tb}
			models   = multiModel{newTokenModel(capacity, big.NewRat(tokens, per), start, true)}
		)
		for _, kind := range []string{"fixed", "log", "sliding"} {
			if r.IntN(2) == 0 {
				continue
			}
			limit, window := 1+r.Int64N(12), 1+r.Int64N(40)
			limiters = append(limiters, newWindowLimiter(t, kind, limit, window, start))
			models = append(models, newWindowModel(kind, limit, window, start))
		}
		r.Shuffle(len(limiters), func(i, j int) {
			limiters[i], limiters[j] = limiters[j], limiters[i]
			models[i], models[j] = models[j], models[i]
		})
		multi, err := bucket.NewMulti(limiters...)
		if err != nil {
			t.Fatal(err)
		}
		w := &walk{r: r, at: start, scale: 10}
		for range 300 {
			compare(t, "multi", multi, models, w.next(), cost(r, models.ceiling()))
		}
	}
}

// FuzzTokenBucket compares the bucket with its model for any parameters and
// any sequence of requests, deposits, drains and clock jumps, including
// instants that wrap around int64. Its seeds run as a normal test.
func FuzzTokenBucket(f *testing.F) {
	f.Add(int64(3), int64(1), int64(time.Second), int64(0), []byte{0, 10, 2, 100, 3, 3, 200, 250, 2, 127, 5, 2})
	f.Add(int64(10), int64(3), int64(time.Second), t0.UnixNano(), []byte{1, 2, 2, 50, 12, 2, 0x80, 7, 2, 3, 4, 0})
	f.Add(int64(1<<40), int64(1_000_000_000_000), int64(1), int64(-1), []byte{5, 255, 2, 9, 0, 2, 9, 1, 2})
	f.Add(int64(math.MaxInt64), int64(1), int64(math.MaxInt64), int64(math.MaxInt64), []byte{127, 2, 2, 127, 1, 2, 1, 3, 1})
	f.Add(int64(7), int64(math.MaxInt64), int64(3), int64(math.MinInt64), []byte{0x81, 2, 2, 0x7f, 9, 8, 2, 2, 2})
	f.Add(int64(0), int64(1), int64(1), int64(0), []byte{})
	f.Fuzz(func(t *testing.T, capacity, tokens, period, start int64, ops []byte) {
		b, err := bucket.NewTokenBucketPer(capacity, tokens, time.Duration(period), time.Unix(0, start))
		if capacity <= 0 || tokens <= 0 || period <= 0 {
			if err == nil {
				t.Fatalf("NewTokenBucketPer(%d, %d, %d) accepted bad parameters", capacity, tokens, period)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		m := newTokenModel(capacity, big.NewRat(tokens, period), start, true)
		at, unit := start, 1+period/16
		ops = ops[:min(len(ops), 3000)] // a thousand operations say all a longer input would
		for i := 0; i+2 < len(ops); i += 3 {
			at += int64(int8(ops[i])) * unit // wraps on purpose
			n := fuzzCost(ops[i+1], capacity)
			switch ops[i+2] % 8 {
			case 0:
				if got, want := b.Deposit(n), m.deposit(n); got != want {
					t.Fatalf("Deposit(%d) = %d, model %d", n, got, want)
				}
			case 1:
				if got, want := b.Drain(), m.drain(); got != want {
					t.Fatalf("Drain() = %d, model %d", got, want)
				}
			default:
				d, err := compare(t, "fuzz", b, m, at, n)
				if err == nil && d.Allowed != (d.RetryAfter == 0) || d.Remaining < 0 || d.Remaining > capacity {
					t.Fatalf("inconsistent decision %+v", d)
				}
			}
		}
	})
}

func fuzzCost(b byte, capacity int64) int64 {
	switch b {
	case 0:
		return 0
	case 1:
		return capacity + 1 // wraps to a negative cost for the largest capacity
	case 2:
		return capacity
	}
	return 1 + int64(b-3)%capacity
}
