package lease

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// maxPoolSize bounds what one key's Pool takes (issue 9: a node's heap per
// live key). It was 520 B (a 576 B allocation) before the pool was slimmed
// (time.Time fields made mono, small fields packed, the carry and the rate
// share moved to a busyState only busy keys make), then 256 B until the
// share's overflow moved to the busyState and the rate estimates became
// float32. 240 B is a size class of its own: one more field takes every key
// to a 256 B allocation.
const maxPoolSize = 240

// maxBusySize bounds the busyState a busy key adds (72 B, in an 80 B size
// class).
const maxBusySize = 80

func TestPoolSize(t *testing.T) {
	size, busy := unsafe.Sizeof(Pool{}), unsafe.Sizeof(busyState{})
	t.Logf("Pool: %d B (managerState %d B), busyState %d B, flight %d B, a queue entry %d B",
		size, unsafe.Sizeof(managerState{}), busy, unsafe.Sizeof(flight{}), unsafe.Sizeof(deadline{}))
	if size > maxPoolSize {
		t.Fatalf("Pool is %d B, more than the %d B it may take: every live key pays it", size, maxPoolSize)
	}
	if busy > maxBusySize {
		t.Fatalf("busyState is %d B, more than the %d B it may take: every busy key pays it", busy, maxBusySize)
	}
}

// grantAll is an allocator that grants every request in full at once and
// keeps nothing: what the benchmark measures is the node's alone.
type grantAll struct{ answered atomic.Int64 }

func (g *grantAll) Acquire(_ context.Context, reqs []Request) ([]Grant, string, error) {
	out := make([]Grant, len(reqs))
	for i, r := range reqs {
		out[i] = Grant{Granted: r.Want, Remaining: 1000, TTL: time.Minute, Holders: 1, Epoch: 1}
	}
	g.answered.Add(int64(len(reqs)))
	return out, "v1", nil
}

func (*grantAll) Release(context.Context, []Return) error { return nil }

// BenchmarkKeyHeap creates n keys in a table and reports the node's heap
// per live key: the pool, its place in the key map and its timer. A key
// with one lease is the long tail's; a refilled key, one whose second lease
// came while tokens were left, also keeps a busyState. The key's own bytes
// are not counted (the keys are made beforehand).
func BenchmarkKeyHeap(b *testing.B) {
	set, err := rules.Parse("bench", []byte(`
rules:
  - name: keys
    algorithm: token_bucket
    limit: 1000
    period: 1s
    lease: { min: 10, max: 100, ttl: 1m, refresh: 1s }
`))
	if err != nil {
		b.Fatal(err)
	}
	r, _ := set.Get("keys")
	for _, n := range []int{1_000, 10_000, 100_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("key-%07d", i)
		}
		for _, refilled := range []bool{false, true} {
			name := fmt.Sprintf("keys=%d/one-lease", n)
			if refilled {
				name = fmt.Sprintf("keys=%d/refilled", n)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var perKey float64
				for range b.N {
					clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
					tr := &grantAll{}
					m := NewManager(Config{Transport: tr, Clock: clk, CallGap: time.Nanosecond})
					tb := m.Table(r)
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					for _, k := range keys {
						tb.Pool(k)
					}
					leaseAll(b, m, clk, tr, n)
					if refilled {
						// Below the low watermark: a second lease while tokens are left.
						tb.each(func(p *Pool) { p.Take(p.Tokens() - p.low.Load() + 1) })
						leaseAll(b, m, clk, tr, 2*n)
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
					runtime.KeepAlive(tb)
					m.Close(context.Background())
				}
				b.ReportMetric(perKey, "heap-B/key")
			})
		}
	}
}

// leaseAll moves the fake clock until the allocator has answered want
// requests and the manager is idle.
func leaseAll(b *testing.B, m *Manager, clk *clock.Fake, tr *grantAll, want int) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		clk.Advance(time.Millisecond)
		for m.calls.Load() > 0 || len(m.results) > 0 || m.inbox.len() > 0 {
			c := make(chan struct{})
			m.sync <- c
			<-c
			runtime.Gosched()
		}
		c := make(chan struct{})
		m.sync <- c
		<-c
		if tr.answered.Load() >= int64(want) && m.calls.Load() == 0 && len(m.results) == 0 {
			return
		}
	}
	b.Fatalf("%d of %d requests answered after a minute", tr.answered.Load(), want)
}

// TestGrantLetsTheFallbackShareGo: the fallback share a new key drew on
// while its first lease was on its way (about 90 bytes) is let go when the
// allocator answers; the key stays as long as the share would have taken
// to fill again.
func TestGrantLetsTheFallbackShareGo(t *testing.T) {
	f := newFixture(t)
	r, _ := f.set.Get("r")
	p := f.table("r").Pool("k")
	share := p.Fallback()
	if d := share.AllowN(r, 2, f.clk.Now(), 100); !d.Allowed { // 100 of 500, refilling at 500/s
		t.Fatalf("fallback: %+v", d)
	}
	f.step(2*time.Millisecond, time.Millisecond)
	if !p.Served() || p.fallback.Load() != nil {
		t.Fatalf("served %v; share still held: %v", p.Served(), p.fallback.Load() != nil)
	}
	if got, want := idleAfter(p), fillTime(r); got != want {
		t.Errorf("a key whose share was let go while refilling stays %v idle, want the fill time %v", got, want)
	}
}

// TestFallbackIsNeverNil: a grant may let the share go between Fallback's
// swap and its load; Fallback still returns a share (a nil one panicked the
// request that decided on it).
func TestFallbackIsNeverNil(t *testing.T) {
	p := &Pool{}
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				p.retireFallback(clk)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 2_000_000 {
		if p.Fallback() == nil {
			t.Fatalf("Fallback returned nil at call %d", i)
		}
	}
}
