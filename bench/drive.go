package main

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// binWidth is the resolution of the admission timeline.
const binWidth = 100 * time.Millisecond

// load describes the traffic of one run.
type load struct {
	rates    []float64 // decisions offered per second, per node
	workers  int       // goroutines per node
	keys     int       // 1: one key; more: Zipf-distributed keys
	duration time.Duration
	events   []event // things to do during the run, e.g. kill the allocator
	saturate bool    // also measure the strategy's throughput, saturated
	counts   *counts // where the per-key counts come from; nil: made per run
	// rateAt, when set, is node's rate at elapsed into the run instead of
	// rates[node] (a load that moves); rates then gives the nodes' count.
	rateAt func(node int, elapsed time.Duration) float64
}

// counts lends the per-key count arrays of runs on many keys (a result's
// two and each worker's two) and the keys' names, made once: the keys scenario makes them
// before it takes the nodes' heap, so that a heap taken during a run counts
// the nodes' keys, not the bench's arrays (half a gigabyte at 1,000,000
// keys). Runs that share one must not overlap.
type counts struct {
	mu     sync.Mutex
	keys   int
	names  []string // the keys' names
	arrays [][]int64
	next   int
}

func newCounts(keys, arrays int) *counts {
	c := &counts{keys: keys, names: keyNames(keys)}
	for range arrays {
		c.arrays = append(c.arrays, make([]int64, keys))
	}
	return c
}

// take lends the next array, zeroed; beyond those made, a new one.
func (c *counts) take() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next >= len(c.arrays) {
		return make([]int64, c.keys)
	}
	a := c.arrays[c.next]
	c.next++
	clear(a)
	return a
}

// perKey makes or lends one per-key count array of l.
func (l load) perKey() []int64 {
	if l.counts != nil && l.counts.keys == l.keys {
		return l.counts.take()
	}
	return make([]int64, l.keys)
}

type event struct {
	at   time.Duration
	what string
	do   func()
}

// result is what one run measured.
type result struct {
	elapsed   time.Duration
	offered   int64
	decided   int64
	admitted  int64
	skipped   int64   // offered but not decided: the limiter could not keep up
	bins      []int64 // admissions of the watched key per bin
	fallbacks []int64 // decisions made by a fallback, per bin
	perNode   []int64
	perKeyOff []int64 // offered per key (many keys)
	perKeyAdm []int64
	latency   histogram
}

// keyName names key i; key 0 is the hottest under Zipf.
func keyName(i int) string { return "k" + strconv.Itoa(i) }

func keyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = keyName(i)
	}
	return names
}

// drive offers the load open-loop: each worker owes decisions at its rate
// and pays them as fast as the strategy allows; a worker more than 50 ms
// behind skips the excess rather than queue without bound.
func drive(s strategy, l load) *result {
	nodes := len(l.rates)
	bins := int(l.duration/binWidth) + 1
	r := &result{bins: make([]int64, bins), perNode: make([]int64, nodes)}
	var names []string
	if l.counts != nil && l.counts.keys == l.keys {
		names = l.counts.names
		l.counts.mu.Lock()
		l.counts.next = 0 // (the previous run is over)
		l.counts.mu.Unlock()
	} else {
		names = keyNames(l.keys)
	}
	if l.keys > 1 {
		r.perKeyOff, r.perKeyAdm = l.perKey(), l.perKey()
	}
	sh := &shared{bins: make([]atomic.Int64, bins), fallbacks: make([]atomic.Int64, bins), perNode: make([]atomic.Int64, nodes)}
	ctx, cancel := context.WithTimeout(context.Background(), l.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for node := range nodes {
		for w := range l.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wr := newWorker(l, node, w)
				rate := func(time.Duration) float64 { return l.rates[node] / float64(l.workers) }
				if l.rateAt != nil {
					rate = func(at time.Duration) float64 { return l.rateAt(node, at) / float64(l.workers) }
				}
				wr.run(ctx, s, start, rate, names, sh)
				mu.Lock()
				wr.mergeInto(r)
				mu.Unlock()
			}()
		}
	}
	runEvents(ctx, start, l.events)
	wg.Wait()
	r.elapsed = min(time.Since(start), l.duration)
	r.fallbacks = make([]int64, bins)
	for i := range r.bins {
		r.bins[i] = sh.bins[i].Load()
		r.fallbacks[i] = sh.fallbacks[i].Load()
	}
	for i := range r.perNode {
		r.perNode[i] = sh.perNode[i].Load()
		r.admitted += r.perNode[i]
	}
	return r
}

func runEvents(ctx context.Context, start time.Time, events []event) {
	for _, e := range events {
		select {
		case <-time.After(time.Until(start.Add(e.at))):
			progress("  %6.2fs  %s", time.Since(start).Seconds(), e.what)
			e.do()
		case <-ctx.Done():
			return
		}
	}
}

// shared holds the counters every worker adds to.
type shared struct {
	bins      []atomic.Int64
	fallbacks []atomic.Int64
	perNode   []atomic.Int64
}

type worker struct {
	node      int
	rng       *rand.Rand
	zipf      *rand.Zipf
	offered   int64
	decided   int64
	skipped   int64
	perKeyOff []int64
	perKeyAdm []int64
	latency   histogram
}

func newWorker(l load, node, w int) *worker {
	wr := &worker{node: node, rng: rand.New(rand.NewPCG(uint64(node), uint64(w)))}
	if l.keys > 1 {
		wr.zipf = rand.NewZipf(wr.rng, 1.1, 1, uint64(l.keys-1))
		wr.perKeyOff, wr.perKeyAdm = l.perKey(), l.perKey()
	}
	return wr
}

func (wr *worker) pick() int {
	if wr.zipf == nil {
		return 0
	}
	return int(wr.zipf.Uint64())
}

// run offers rateAt(elapsed) decisions a second until ctx ends.
func (wr *worker) run(ctx context.Context, s strategy, start time.Time, rateAt func(time.Duration) float64, names []string, sh *shared) {
	const step = 2 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	last := time.Now()
	owed := wr.rng.Float64() // spread the workers' first decisions
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			rate := rateAt(now.Sub(start))
			owed += rate * now.Sub(last).Seconds()
			last = now
			if limit := rate * 0.05; owed > limit+1 {
				wr.skipped += int64(owed - limit)
				wr.offered += int64(owed - limit)
				owed -= math.Floor(owed - limit)
			}
			for ; owed >= 1 && ctx.Err() == nil; owed-- {
				wr.once(ctx, s, start, names, sh)
			}
		}
	}
}

func (wr *worker) once(ctx context.Context, s strategy, start time.Time, names []string, sh *shared) {
	k := wr.pick()
	t0 := time.Now()
	ok, fallback := s.decide(ctx, wr.node, names[k])
	t1 := time.Now()
	wr.latency.add(t1.Sub(t0))
	wr.offered++
	wr.decided++
	if wr.perKeyOff != nil {
		wr.perKeyOff[k]++
	}
	bin := int(t1.Sub(start) / binWidth)
	if fallback && bin < len(sh.fallbacks) {
		sh.fallbacks[bin].Add(1)
	}
	if !ok {
		return
	}
	if wr.perKeyAdm != nil {
		wr.perKeyAdm[k]++
	}
	sh.perNode[wr.node].Add(1)
	if k == 0 && bin < len(sh.bins) {
		sh.bins[bin].Add(1)
	}
}

func (wr *worker) mergeInto(r *result) {
	r.offered += wr.offered
	r.decided += wr.decided
	r.skipped += wr.skipped
	r.latency.merge(&wr.latency)
	for i := range wr.perKeyOff {
		r.perKeyOff[i] += wr.perKeyOff[i]
		r.perKeyAdm[i] += wr.perKeyAdm[i]
	}
}

// saturate runs every node's workers in a tight loop on one key for d and
// returns the decisions made per second: what the strategy can sustain.
func saturate(s strategy, nodes, workers int, d time.Duration) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for node := range nodes {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := int64(0)
				for ctx.Err() == nil {
					s.decide(ctx, node, "sat")
					n++
				}
				total.Add(n)
			}()
		}
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

// histogram counts latencies in buckets 10% apart, from 10 ns to ~100 s.
type histogram struct {
	counts [250]int64
	n      int64
}

const histBase = 1.1

func (h *histogram) add(d time.Duration) {
	ns := max(float64(d.Nanoseconds()), 10)
	i := min(int(math.Log(ns/10)/math.Log(histBase)), len(h.counts)-1)
	h.counts[i]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.n += o.n
}

// quantile is the upper edge of the bucket holding the q-th latency.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	target := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= target {
			return time.Duration(10 * math.Pow(histBase, float64(i+1)))
		}
	}
	return time.Duration(10 * math.Pow(histBase, float64(len(h.counts))))
}
