package store

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// Memory is the embedded store of a single allocator. Its state lives in the
// process and is lost on restart; keys are forgotten when their state would
// have reset by itself, so memory follows the number of active keys, up to
// MemoryOptions.MaxKeys: past it a new key is refused with ErrFull, while
// the keys held keep deciding.
type Memory struct {
	clk     clock.Clock
	seed    maphash.Seed
	shards  [memoryShards]memoryShard
	maxKeys int64
	keys    atomic.Int64  // held, over every shard
	refused atomic.Uint64 // calls refused because the store was full
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

const (
	memoryShards = 64
	// sweepEvery is how often expired keys are dropped.
	sweepEvery = 10 * time.Second
	// fullSweepGap is the least time between two sweeps of one shard made
	// because the store was full: a flood of new keys at the cap costs a
	// scan of the store a second at most, not one per call.
	fullSweepGap = time.Second
)

// DefaultMemoryMaxKeys is MemoryOptions.MaxKeys' default. A token-bucket
// key with one holder takes ~850 B here (the map entry, its state and its
// holders map; measured with 500,000 keys), more with several holders, so
// the default bounds the store near 2 GB: room for the active keys of a
// large fleet on one allocator, and a bound a small host survives. A
// fleet with more active keys than this wants Redis.
const DefaultMemoryMaxKeys = 2_000_000

// MemoryOptions tune the memory store. The zero value is the default.
type MemoryOptions struct {
	// MaxKeys bounds the (rule, key) states held. A call that would add
	// one more is refused with ErrFull, after expired keys are swept;
	// calls on keys held go on. default: DefaultMemoryMaxKeys
	MaxKeys int
}

type memoryShard struct {
	mu sync.Mutex
	m  map[memKey]*state
	// soonest is at most the earliest expiry in m (µs): before it, a sweep
	// of the shard would find nothing. swept is when a full store last
	// swept it.
	soonest, swept int64
}

type memKey struct {
	rule    string
	alg     rules.Algorithm // a rule whose algorithm changes on reload starts afresh
	variant string          // so does a window whose period changes (stateVariant)
	key     string
}

// NewMemory returns an in-memory store with the default options, reading
// time from clk, and starts the sweeper that Close stops.
func NewMemory(clk clock.Clock) *Memory { return NewMemoryWith(clk, MemoryOptions{}) }

// NewMemoryWith is NewMemory with options.
func NewMemoryWith(clk clock.Clock, o MemoryOptions) *Memory {
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMemoryMaxKeys
	}
	m := &Memory{clk: clk, seed: maphash.MakeSeed(), maxKeys: int64(o.MaxKeys), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]*state)
	}
	go m.sweepLoop()
	return m
}

func (m *Memory) now() int64 { return m.clk.Now().UnixMicro() }

// absent says what with does for a key that has no state.
type absent uint8

const (
	// absentCreate makes the key's state, under the cap.
	absentCreate absent = iota
	// absentSkip leaves the key missing and runs nothing: what a call on
	// a fresh state that changes nothing would do (a Release).
	absentSkip
)

// with runs f on the state of (rule, key) under its shard's lock. A key
// that is new takes a place under the cap, or the call gets a *FullError;
// with absentSkip it is left missing.
func (m *Memory) with(r *rules.Rule, key string, now int64, ifAbsent absent, f func(*state)) error {
	k := memKey{rule: r.Name, alg: r.Algorithm, variant: stateVariant(r), key: key}
	sh := &m.shards[maphash.String(m.seed, key)%memoryShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, ok := sh.m[k]
	switch {
	case ok && st.expires > now:
	case ifAbsent == absentSkip:
		return nil
	case ok: // expired: starts afresh in its place
		st = newState(r, now)
		sh.m[k] = st
	default:
		if err := m.admit(sh, now); err != nil {
			return err
		}
		st = newState(r, now)
		sh.m[k] = st
	}
	f(st)
	sh.soonest = min(sh.soonest, st.expires)
	return nil
}

// admit takes a place for a new key in sh, whose lock the caller holds.
// At the cap it sweeps what may have expired first: sh, then the shards
// whose lock is free (waiting for one while holding sh's could deadlock
// with a caller doing the same the other way round).
func (m *Memory) admit(sh *memoryShard, now int64) error {
	if m.reserve() {
		return nil
	}
	if m.sweepIfDue(sh, now) && m.reserve() {
		return nil
	}
	for i := range m.shards {
		o := &m.shards[i]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		swept := m.sweepIfDue(o, now)
		o.mu.Unlock()
		if swept && m.reserve() {
			return nil
		}
	}
	m.refused.Add(1)
	return &FullError{Store: "memory", Keys: m.keys.Load(), Max: m.maxKeys}
}

// reserve counts one more key if the cap allows it.
func (m *Memory) reserve() bool {
	if m.keys.Add(1) <= m.maxKeys {
		return true
	}
	m.keys.Add(-1)
	return false
}

// sweepIfDue sweeps sh, whose lock the caller holds, if a key there may
// have expired and a full store has not swept it within fullSweepGap.
func (m *Memory) sweepIfDue(sh *memoryShard, now int64) bool {
	if now < sh.soonest || now-sh.swept < fullSweepGap.Microseconds() {
		return false
	}
	sh.swept = now
	m.sweepShard(sh, now)
	return true
}

// sweepShard drops the expired keys of sh, whose lock the caller holds,
// and learns the shard's earliest expiry.
func (m *Memory) sweepShard(sh *memoryShard, now int64) {
	soonest := int64(maxWaitUS)
	for k, st := range sh.m {
		if st.expires <= now {
			delete(sh.m, k)
			m.keys.Add(-1)
			continue
		}
		soonest = min(soonest, st.expires)
	}
	sh.soonest = soonest
}

// Acquire implements Store. A batch that meets a new key at the cap fails
// there with a *FullError naming it; the requests before it were applied,
// as a Redis pipeline cut short leaves them, and a node's retry with the
// same sequence numbers is answered again, not applied twice.
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
		if err := m.with(req.Rule, req.Key, now, absentCreate, func(st *state) { out[i] = st.acquire(req.Rule, now, req) }); err != nil {
			var full *FullError
			if errors.As(err, &full) {
				full.Request = i
			}
			return nil, err
		}
	}
	return out, nil
}

// Release implements Store. A key not held is skipped: releasing into a
// fresh state changes nothing, so a full store never refuses a return.
func (m *Memory) Release(ctx context.Context, rets []Return) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rets {
		if !rets[i].Rule.Leasable() && !rets[i].Rule.IsConcurrency() {
			return ErrNotLeasable
		}
	}
	now := m.now()
	for i := range rets {
		ret := &rets[i]
		_ = m.with(ret.Rule, ret.Key, now, absentSkip, func(st *state) { st.release(ret.Rule, now, ret) })
	}
	return nil
}

// Check implements Store.
func (m *Memory) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (Decision, error) {
	if err := checkable(ctx, r, cost); err != nil {
		return Decision{}, err
	}
	now := m.now()
	var d Decision
	if err := m.with(r, key, now, absentCreate, func(st *state) { d = st.check(r, now, cost) }); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// Len is the number of keys held, counted shard by shard; tests use it to
// see the sweeper work.
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

// Keys is the number of keys held, without a lock: the metric's reading.
func (m *Memory) Keys() int64 { return m.keys.Load() }

// MaxKeys is the cap on Keys.
func (m *Memory) MaxKeys() int64 { return m.maxKeys }

// Refused counts the calls refused with ErrFull.
func (m *Memory) Refused() uint64 { return m.refused.Load() }

// Sweep drops every key whose state has expired.
func (m *Memory) Sweep() {
	now := m.now()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		m.sweepShard(sh, now)
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

// Exists implements Exister: whether each request's key holds a state
// that has not expired.
func (m *Memory) Exists(ctx context.Context, reqs []AcquireRequest) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := m.now()
	out := make([]bool, len(reqs))
	for i := range reqs {
		r := reqs[i].Rule
		k := memKey{rule: r.Name, alg: r.Algorithm, variant: stateVariant(r), key: reqs[i].Key}
		sh := &m.shards[maphash.String(m.seed, k.key)%memoryShards]
		sh.mu.Lock()
		st, ok := sh.m[k]
		out[i] = ok && st.expires > now
		sh.mu.Unlock()
	}
	return out, nil
}
