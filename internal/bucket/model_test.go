package bucket_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

// tokenModel is a deliberately simple reference token bucket: exact
// rationals instead of scaled integers, stepped from instant to instant. The
// property tests drive it and the real bucket with the same requests and
// demand identical answers.
type tokenModel struct {
	capacity int64
	rate     *big.Rat // tokens per nanosecond
	tokens   *big.Rat
	last     *big.Int // latest instant seen
}

func newTokenModel(capacity int64, rate *big.Rat, now int64) *tokenModel {
	return &tokenModel{capacity: capacity, rate: rate, tokens: new(big.Rat).SetInt64(capacity), last: big.NewInt(now)}
}

func (m *tokenModel) allow(t int64) bool {
	at := big.NewInt(t)
	if at.Cmp(m.last) > 0 {
		elapsed := new(big.Rat).SetInt(new(big.Int).Sub(at, m.last))
		m.tokens.Add(m.tokens, elapsed.Mul(elapsed, m.rate))
		if full := new(big.Rat).SetInt64(m.capacity); m.tokens.Cmp(full) > 0 {
			m.tokens = full
		}
		m.last = at
	}
	one := big.NewRat(1, 1)
	if m.tokens.Cmp(one) < 0 {
		return false
	}
	m.tokens.Sub(m.tokens, one)
	return true
}

// compare runs one request on both and fails on any difference.
func compare(t *testing.T, what string, b *bucket.TokenBucket, m *tokenModel, at int64) {
	t.Helper()
	if got, want := b.Allow(time.Unix(0, at)), m.allow(at); got != want {
		t.Fatalf("%s: Allow(%d) = %v, model %v", what, at, got, want)
	}
}

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
		m := newTokenModel(capacity, big.NewRat(tokens, per), start)
		w := &walk{r: r, at: start, scale: per * 2 / tokens}
		for range 500 {
			compare(t, "token bucket", b, m, w.next())
		}
	}
}

// FuzzTokenBucket compares the bucket with its model for any parameters and
// any sequence of requests and clock jumps, including instants that wrap
// around int64. Its seeds run as a normal test.
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
		m := newTokenModel(capacity, big.NewRat(tokens, period), start)
		at, unit := start, 1+period/16
		ops = ops[:min(len(ops), 2000)] // a thousand requests say all a longer input would
		for i := 0; i+1 < len(ops); i += 2 {
			at += int64(int8(ops[i])) * unit // wraps on purpose
			for range 1 + ops[i+1]%4 {
				compare(t, "fuzz", b, m, at)
			}
		}
	})
}
