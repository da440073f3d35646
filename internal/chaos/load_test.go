package chaos

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/rules"
)

// binWidth is the resolution of the timelines.
const binWidth = 100 * time.Millisecond

// measure is what the fleet decided during one run.
type measure struct {
	open   *rules.Rule // the rule under load, failure: open
	start  time.Time
	length time.Duration

	admitted  []atomic.Int64   // open-rule admissions per bin, fleet-wide
	perNode   [][]atomic.Int64 // the same per node
	fallback  []atomic.Int64   // decisions made in fallback, both rules, per bin
	offered   atomic.Int64
	errors    atomic.Int64
	firstErr  atomic.Value // error
	openModes [4]atomic.Int64

	// The failure: closed rule, by mode.
	closedAllowed, closedDenied [4]atomic.Int64

	// window, for a window rule: its admissions per window of the store.
	window *windowCount

	faultStart, faultEnd time.Time
}

func newMeasure(open *rules.Rule, length time.Duration, nodes int) *measure {
	bins := int(length / binWidth)
	m := &measure{open: open, length: length, admitted: make([]atomic.Int64, bins), fallback: make([]atomic.Int64, bins),
		perNode: make([][]atomic.Int64, nodes)}
	for i := range m.perNode {
		m.perNode[i] = make([]atomic.Int64, bins)
	}
	return m
}

func (m *measure) bin(at time.Time) int {
	b := int(at.Sub(m.start) / binWidth)
	if b < 0 || b >= len(m.admitted) {
		return -1
	}
	return b
}

// offer calls decide rate times a second on average until ctx ends, open
// loop: a caller that falls more than 50ms behind drops the excess, as a
// service sheds what it cannot take.
func offer(ctx context.Context, rate float64, decide func()) {
	const step = 2 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	owed, last := 1.0, time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			owed = min(owed+rate*now.Sub(last).Seconds(), rate*0.05+1)
			last = now
			for ; owed >= 1 && ctx.Err() == nil; owed-- {
				decide()
			}
		}
	}
}

// decideOpen makes one decision on the open rule through node i's slot.
func (m *measure) decideOpen(s *slot, node int) {
	at := time.Now()
	var win int64
	if m.window != nil {
		win = m.window.at()
	}
	m.offered.Add(1)
	d, err := s.allow(m.open.Name)
	if m.failed(err) {
		return
	}
	m.openModes[d.Mode].Add(1)
	b := m.bin(at)
	if d.Mode == client.ModeFallback && b >= 0 {
		m.fallback[b].Add(1)
	}
	if !d.Allowed {
		return
	}
	if b >= 0 {
		m.admitted[b].Add(1)
		m.perNode[node][b].Add(1)
	}
	if m.window != nil {
		m.window.count(d.Mode, win, m.window.at())
	}
}

// decideClosed makes one decision on the failure: closed rule.
func (m *measure) decideClosed(s *slot, rule string) {
	at := time.Now()
	d, err := s.allow(rule)
	if m.failed(err) {
		return
	}
	if d.Mode == client.ModeFallback {
		if b := m.bin(at); b >= 0 {
			m.fallback[b].Add(1)
		}
	}
	if d.Allowed {
		m.closedAllowed[d.Mode].Add(1)
	} else {
		m.closedDenied[d.Mode].Add(1)
	}
}

func (m *measure) failed(err error) bool {
	if err == nil {
		return false
	}
	m.errors.Add(1)
	m.firstErr.CompareAndSwap(nil, err)
	return true
}

func (m *measure) total() (sum int64) {
	for i := range m.admitted {
		sum += m.admitted[i].Load()
	}
	return sum
}

func (m *measure) fallbacks() (sum int64) {
	for i := range m.fallback {
		sum += m.fallback[i].Load()
	}
	return sum
}

// nodeBetween is what node i admitted from from to to.
func (m *measure) nodeBetween(i int, from, to time.Time) (sum int64) {
	for b := range m.perNode[i] {
		at := m.start.Add(time.Duration(b) * binWidth)
		if !at.Before(from) && at.Before(to) {
			sum += m.perNode[i][b].Load()
		}
	}
	return sum
}

// window returns the most admitted in any window of width bins.
func (m *measure) worst(width int) int64 {
	var worst, sum int64
	for i := range m.admitted {
		sum += m.admitted[i].Load()
		if i >= width {
			sum -= m.admitted[i-width].Load()
		}
		if i >= width-1 {
			worst = max(worst, sum)
		}
	}
	return worst
}

// bounds are the run's figures against guarantee 2 of docs/design.md.
type bounds struct {
	admitted   int64
	ideal      float64 // burst + rate·T: what a perfect limiter admits
	whole      float64 // burst + rate·(T + ttl) over the whole run
	worstRatio float64 // the highest admitted/bound of any window of 1s or more
	worstSpan  time.Duration
	worst1s    int64
	bound1s    float64 // burst + 1.1·rate
	// over is the most any window of 1s or more admitted above its bound
	// and the fault's allowance (≤ 0: every window kept it), and overSpan
	// that window's length.
	over     float64
	overSpan time.Duration
}

// bounds measures the run. extra is what the scenario's fault may add to
// every window's bound (0 for none); the ratios are to guarantee 2's
// bounds without it.
func (m *measure) bounds(extra float64) bounds {
	r := m.open
	burst, rate, ttl := float64(r.Capacity()), r.Rate(), r.Lease.TTL.Seconds()
	per := int(time.Second / binWidth)
	T := float64(len(m.admitted)) * binWidth.Seconds()
	b := bounds{admitted: m.total(), ideal: burst + rate*T, whole: burst + rate*(T+ttl),
		worst1s: m.worst(per), bound1s: burst + 1.1*rate, over: math.Inf(-1)}
	if over := float64(b.worst1s) - b.bound1s - extra; over > b.over {
		b.over, b.overSpan = over, time.Second
	}
	for width := per; width <= len(m.admitted); width++ {
		span := time.Duration(width) * binWidth
		worst, bound := float64(m.worst(width)), burst+rate*(span.Seconds()+ttl)
		if ratio := worst / bound; ratio > b.worstRatio {
			b.worstRatio, b.worstSpan = ratio, span
		}
		if over := worst - bound - extra; over > b.over {
			b.over, b.overSpan = over, span
		}
	}
	return b
}

// backOnLeases is how long after the fault ended the fleet took to make no
// fallback decision for a second; -1: it never did within the run.
func (m *measure) backOnLeases() time.Duration {
	per := int(time.Second / binWidth)
	from := max(int(m.faultEnd.Sub(m.start)/binWidth), 0)
	for b := from; b+per <= len(m.fallback); b++ {
		clean := true
		for i := b; i < b+per && clean; i++ {
			clean = m.fallback[i].Load() == 0
		}
		if clean {
			return max(m.start.Add(time.Duration(b)*binWidth).Sub(m.faultEnd), 0)
		}
	}
	return never
}

// windowCount attributes a window rule's admissions to the store's
// windows: the store's clock at the decision, its window never going back
// (a window does not reopen when the store's clock steps back: the store
// stays in its newest window until the clock is past it). A decision
// whose window changed while it was made is counted as unsure: it may
// belong to either.
type windowCount struct {
	period time.Duration
	now    func() time.Time // the store's clock

	mu     sync.Mutex
	newest int64
	lease  map[int64]int64 // admitted on leases, surely in the window
	other  map[int64]int64 // admitted in fallback: debited, may pass the limit
	unsure map[int64]int64 // admitted on a window's edge
}

func newWindowCount(period time.Duration, now func() time.Time) *windowCount {
	return &windowCount{period: period, now: now, newest: math.MinInt64,
		lease: make(map[int64]int64), other: make(map[int64]int64), unsure: make(map[int64]int64)}
}

// at is the store's window now.
func (w *windowCount) at() int64 {
	at := w.now().UnixMicro() / w.period.Microseconds()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.newest = max(w.newest, at)
	return w.newest
}

// count counts an admission made between windows from and to.
func (w *windowCount) count(mode client.Mode, from, to int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case from != to:
		w.unsure[from]++
		w.unsure[to]++
	case mode == client.ModeLease:
		w.lease[from]++
	default:
		w.other[from]++
	}
}

// fullest is the window that admitted most, surely, and what it admitted
// on leases, in fallback, and maybe on its edges.
func (w *windowCount) fullest() (window, leased, fallback, unsure int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for win, n := range w.lease {
		if n+w.other[win] > leased+fallback {
			window, leased, fallback, unsure = win, n, w.other[win], w.unsure[win]
		}
	}
	return window, leased, fallback, unsure
}

func (w *windowCount) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var wins []int64
	for win := range w.lease {
		wins = append(wins, win)
	}
	slices.Sort(wins)
	var b strings.Builder
	b.WriteString("per store window, admitted on leases + in fallback (+ on its edges):")
	for _, win := range wins {
		fmt.Fprintf(&b, " %d+%d(+%d)", w.lease[win], w.other[win], w.unsure[win])
	}
	return b.String()
}

const modeFallback = client.ModeFallback

// fallbackFrom counts the fallback decisions from after into the run.
func (m *measure) fallbackFrom(after time.Duration) (sum int64) {
	for b := int(after / binWidth); b < len(m.fallback); b++ {
		sum += m.fallback[b].Load()
	}
	return sum
}

// timeline lists, per bin, what the fleet admitted and the fallback
// decisions, for reading a run (CHAOS_LOG).
func (m *measure) timeline() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fault from %.1fs to %.1fs; per %v, admitted/fallback:", m.faultStart.Sub(m.start).Seconds(),
		m.faultEnd.Sub(m.start).Seconds(), binWidth)
	for i := range m.admitted {
		if i%10 == 0 {
			fmt.Fprintf(&b, "\n%3ds:", i/10)
		}
		fmt.Fprintf(&b, " %d/%d", m.admitted[i].Load(), m.fallback[i].Load())
	}
	return b.String()
}
