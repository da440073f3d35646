package lease

import (
	"sync"
	"time"
)

// StrictDebts keeps what strict rules admitted on the node's fallback
// allowance while the allocator could not decide, until it can be
// reported: like any fallback admission it is debited after recovery
// (docs/design.md, guarantee 4). Strict rules have no lease to carry the
// report; this is theirs. One report per key, its admissions summed and
// dated by the first (the allocator refuses a call that names a key
// twice, and bounds a report by its age). The zero value is empty.
type StrictDebts struct {
	mu sync.Mutex
	m  map[strictKey]*strictDebt
}

type strictKey struct{ rule, key string }

type strictDebt struct {
	n       int64
	since   time.Time // when the first of them was admitted
	settled int64     // settled costs above their estimate (settle.go), undated
}

// maxStrictDebts bounds the keys kept; an outage long and wide enough to
// pass it loses the reports of further keys (under-reporting by at most
// what those keys admitted on their allowances).
const maxStrictDebts = 100_000

// Add keeps n tokens admitted at now on rule's key.
func (d *StrictDebts) Add(rule, key string, n int64, now time.Time) { d.put(rule, key, n, 0, now) }

// AddSettled keeps a settled cost that could not reach the allocator.
func (d *StrictDebts) AddSettled(rule, key string, n int64, now time.Time) {
	d.put(rule, key, 0, n, now)
}

func (d *StrictDebts) put(rule, key string, n, settled int64, now time.Time) {
	if n <= 0 && settled <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = make(map[strictKey]*strictDebt)
	}
	k := strictKey{rule, key}
	if e, ok := d.m[k]; ok {
		if e.n <= 0 || now.Before(e.since) {
			e.since = now
		}
		e.n += n
		e.settled += settled
		return
	}
	if len(d.m) < maxStrictDebts {
		d.m[k] = &strictDebt{n: n, since: now, settled: settled}
	}
}

// Pending reports whether a report waits.
func (d *StrictDebts) Pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m) > 0
}

// Take empties the debts into reports, one per key.
func (d *StrictDebts) Take(now time.Time) []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Request, 0, len(d.m))
	for k, e := range d.m {
		out = append(out, Request{Rule: k.rule, Key: k.key, Consumed: e.n, ConsumedAge: max(now.Sub(e.since), 0), Settled: e.settled})
	}
	d.m = nil
	return out
}

// Restore puts back reports that did not reach the allocator.
func (d *StrictDebts) Restore(reqs []Request, now time.Time) {
	for _, r := range reqs {
		d.put(r.Rule, r.Key, r.Consumed, r.Settled, now.Add(-r.ConsumedAge))
	}
}
