package store

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// Memory is the embedded store of a single allocator. Its state lives in the
// process and is lost on restart; keys are forgotten when their state would
// have reset by itself, so memory follows the number of active keys.
type Memory struct {
	clk    clock.Clock
	seed   maphash.Seed
	shards [memoryShards]memoryShard
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

const (
	memoryShards = 64
	// sweepEvery is how often expired keys are dropped.
	sweepEvery = 10 * time.Second
)

type memoryShard struct {
	mu sync.Mutex
	m  map[memKey]*state
}

type memKey struct {
	rule    string
	alg     rules.Algorithm // a rule whose algorithm changes on reload starts afresh
	variant string          // so does a window whose period changes (stateVariant)
	key     string
}

// NewMemory returns an in-memory store reading time from clk, and starts
// the sweeper that Close stops.
func NewMemory(clk clock.Clock) *Memory {
	m := &Memory{clk: clk, seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]*state)
	}
	go m.sweepLoop()
	return m
}

func (m *Memory) now() int64 { return m.clk.Now().UnixMicro() }

// with runs f on the state of (rule, key) under its shard's lock.
func (m *Memory) with(r *rules.Rule, key string, now int64, f func(*state)) {
	k := memKey{rule: r.Name, alg: r.Algorithm, variant: stateVariant(r), key: key}
	sh := &m.shards[maphash.String(m.seed, key)%memoryShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, ok := sh.m[k]
	if !ok || st.expires <= now {
		st = newState(r, now)
		sh.m[k] = st
	}
	f(st)
}

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, reqs []AcquireRequest) ([]Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range reqs {
		if !reqs[i].Reportable() {
			return nil, ErrNotLeasable
		}
	}
	now := m.now()
	out := make([]Lease, len(reqs))
	for i := range reqs {
		req := &reqs[i]
		m.with(req.Rule, req.Key, now, func(st *state) { out[i] = st.acquire(req.Rule, now, req) })
	}
	return out, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, rets []Return) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rets {
		if !rets[i].Rule.Leasable() {
			return ErrNotLeasable
		}
	}
	now := m.now()
	for i := range rets {
		ret := &rets[i]
		m.with(ret.Rule, ret.Key, now, func(st *state) { st.release(ret.Rule, now, ret) })
	}
	return nil
}

// Check implements Store.
func (m *Memory) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if cost > r.Capacity() {
		return Decision{}, ErrCostAboveCapacity
	}
	now := m.now()
	var d Decision
	m.with(r, key, now, func(st *state) { d = st.check(r, now, cost) })
	return d, nil
}

// Len is the number of keys held; tests use it to see the sweeper work.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every key whose state has expired.
func (m *Memory) Sweep() {
	now := m.now()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, st := range sh.m {
			if st.expires <= now {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

func (m *Memory) sweepLoop() {
	defer close(m.done)
	t := m.clk.NewTimer(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C():
			m.Sweep()
			t.Reset(sweepEvery)
		}
	}
}

// Close stops the sweeper.
func (m *Memory) Close() error {
	m.once.Do(func() { close(m.stop) })
	<-m.done
	return nil
}
