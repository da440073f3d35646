package fleet

import (
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// binWidth is the resolution of the offered load's timeline, and of the
// admissions' when FLEET_LOG shows it. Bins start on wall-clock multiples
// of it, so that each lies in one of the store's windows.
const binWidth = 100 * time.Millisecond

// run is what a fleet admitted under one load.
type run struct {
	rule   *rules.Rule
	length time.Duration
	// start is the run's origin on the monotonic clock; every instant here
	// is a duration since it. wall0 is its wall-clock time (ns), which
	// places an instant in the store's windows: the allocator's clock is
	// Redis's TIME, this machine's wall clock.
	start time.Time
	wall0 int64

	offered     atomic.Int64
	offeredBins []atomic.Int64 // offered per binWidth, fleet-wide
	perNode     []atomic.Int64 // admitted
	fallback    []atomic.Int64 // decisions made in fallback, per node
	// first and last are when the first and the last request were offered:
	// a perfect token bucket admits the burst and the rate between them,
	// no more.
	first, last atomic.Int64

	mu     sync.Mutex
	at     []int64   // every admission's instant, sorted once the run is over
	nodeAt [][]int64 // each node's, in the order its callers finished

	cpu time.Duration // the process's CPU time (user and system) over the run
	// machine is the whole machine's busy CPUs over the run, every
	// process's: what the fleet's measurements shared the machine with.
	machine float64
}

// machineTicks reads the machine's busy and total CPU time, in ticks of
// every CPU, from /proc/stat (zero where there is none). Niced processes'
// time counts as idle: make test's simulator runs niced, at the idle
// scheduling class, on what the fleet leaves (scripts/test-stages.sh).
func machineTicks() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	for i, f := range fields[1:min(len(fields), 9)] { // (guest time is in user's already)
		var n int64
		fmt.Sscan(f, &n)
		total += n
		if i != 1 && i != 3 && i != 4 { // nice, idle, iowait
			busy += n
		}
	}
	return busy, total
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func newRun(r *rules.Rule, d time.Duration, n int) *run {
	start := time.Now()
	return &run{rule: r, length: d, start: start, wall0: start.UnixNano(),
		offeredBins: make([]atomic.Int64, (d+time.Second)/binWidth+2),
		perNode:     make([]atomic.Int64, n), fallback: make([]atomic.Int64, n), nodeAt: make([][]int64, n)}
}

// bin is the bin of the instant el.
func (r *run) bin(el time.Duration) int {
	return int((int64(el) + r.wall0%int64(binWidth)) / int64(binWidth))
}

// offer counts n requests offered at el.
func (r *run) offer(el time.Duration, n int64) {
	r.offered.Add(n)
	if b := r.bin(el); b < len(r.offeredBins) {
		r.offeredBins[b].Add(n)
	}
	r.first.CompareAndSwap(0, int64(el)+1)
	for at := int64(el) + 1; ; {
		if l := r.last.Load(); l >= at || r.last.CompareAndSwap(l, at) {
			break
		}
	}
}

// add records the admissions of one caller of node.
func (r *run) add(node int, at []int64) {
	r.mu.Lock()
	r.at = append(r.at, at...)
	r.nodeAt[node] = append(r.nodeAt[node], at...)
	r.mu.Unlock()
}

// admittedBetween is what the nodes for which of says yes admitted in
// [from, to).
func (r *run) admittedBetween(of func(node int) bool, from, to time.Duration) (n int) {
	for node, at := range r.nodeAt {
		if !of(node) {
			continue
		}
		for _, x := range at {
			if x >= int64(from) && x < int64(to) {
				n++
			}
		}
	}
	return n
}

func (r *run) finish() { slices.Sort(r.at) }

func (r *run) admitted() int64 { return int64(len(r.at)) }

// ideal is what a perfect limiter admits. A token bucket: the burst and
// the rate from the first request offered to the last, or what was
// offered if that is less (every load here offers more than the rate
// throughout). A window: each of the store's windows, min(offered in it,
// limit).
func (r *run) ideal() float64 {
	if r.rule.Algorithm == rules.FixedWindow {
		var sum float64
		for _, offered := range r.offeredPerWindow() {
			sum += float64(min(offered, r.rule.Limit))
		}
		return sum
	}
	span := time.Duration(r.last.Load() - r.first.Load()).Seconds()
	return min(float64(r.offered.Load()), float64(r.rule.Burst)+r.rule.Rate()*span)
}

// window is the store's window index of the instant el.
func (r *run) window(el int64) int64 { return (r.wall0 + el) / int64(r.rule.Period) }

func (r *run) offeredPerWindow() map[int64]int64 {
	per := map[int64]int64{}
	for b := range r.offeredBins {
		if n := r.offeredBins[b].Load(); n > 0 {
			// (A bin lies in one window: both start on wall-clock multiples.)
			per[r.window(int64(b)*int64(binWidth)-r.wall0%int64(binWidth))] += n
		}
	}
	return per
}

// admittedPerWindow is what the fleet admitted in each of the store's
// windows.
func (r *run) admittedPerWindow() map[int64]int64 {
	per := map[int64]int64{}
	for _, at := range r.at {
		per[r.window(at)]++
	}
	return per
}

// worstStoreWindow is the most admitted in one store window.
func (r *run) worstStoreWindow() (worst int64) {
	for _, n := range r.admittedPerWindow() {
		worst = max(worst, n)
	}
	return worst
}

// worstSecond is the most admitted in any second [t, t+1s), t any
// instant (the best window starts at an admission), and where that second
// starts.
func (r *run) worstSecond() (worst int, from time.Duration) {
	for i, j := 0, 0; j < len(r.at); j++ {
		for r.at[j]-r.at[i] >= int64(time.Second) {
			i++
		}
		if j-i+1 > worst {
			worst, from = j-i+1, time.Duration(r.at[i])
		}
	}
	return worst, from
}

// boundSlack is the least, over every window [t, t+T) with T ≥ 1 s, of
// burst + rate·(T + ttl) less what the window admitted, and the T where
// it is least: negative is a breach of the bound. Every window is
// considered: the one from admission i to admission j needs T = max(1 s,
// at[j] - at[i]), and for T > 1 s what matters is the least i - rate·at[i]
// before at[j] - 1 s.
func (r *run) boundSlack() (slack float64, T time.Duration) {
	burst, rate, ttl := float64(r.rule.Burst), r.rule.Rate(), r.rule.Lease.TTL.Seconds()
	worst, _ := r.worstSecond()
	slack, T = burst+rate*(1+ttl)-float64(worst), time.Second
	sec := func(at int64) float64 { return float64(at) / 1e9 }
	best, bestAt := math.Inf(1), int64(0)
	for i, j := 0, 0; j < len(r.at); j++ {
		for ; i < j && r.at[j]-r.at[i] >= int64(time.Second); i++ {
			if v := float64(i) - rate*sec(r.at[i]); v < best {
				best, bestAt = v, r.at[i]
			}
		}
		if best == math.Inf(1) {
			continue
		}
		// admitted in [bestAt, at[j]] less the bound for T = at[j] - bestAt
		if s := burst + rate*ttl - (float64(j+1) - rate*sec(r.at[j]) - best); s < slack {
			slack, T = s, time.Duration(r.at[j]-bestAt)
		}
	}
	return slack, T
}

// checkBounds fails the test if any window of a second or more admitted
// more than burst + rate·(T + ttl), or any second more than burst +
// 1.1·rate (docs/design.md, Guarantees), and, for a fixed window, if any of
// the store's windows admitted more than the limit.
func (r *run) checkBounds(t *testing.T) {
	t.Helper()
	if w, from, bound := r.worstSecondOver(); w > 0 {
		t.Errorf("the second from %v admitted %d > its bound, burst + 1.1·rate + 2 a node (docs/bounds.md) = %.0f", from.Round(time.Millisecond), w, bound)
	}
	r.checkFleetBound(t)
}

// worstSecondOver is the run's worst one-second window when it admitted
// more than burst + 1.1·rate (0 when it did not), where it starts, and
// that bound, with the two tokens a node more that docs/bounds.md allows
// any second ("Shares split below a token": each node's capped token and a
// nearly whole one), as the simulator's oracle does.
func (r *run) worstSecondOver() (int, time.Duration, float64) {
	bound := float64(r.rule.Burst) + 1.1*r.rule.Rate() + 2*nodes
	if w, from := r.worstSecond(); float64(w) > bound {
		return w, from, bound
	}
	return 0, 0, bound
}

// checkFleetBound checks the bounds but the worst second's: every window
// under burst + rate·(T + ttl), and a fixed window's under its limit.
func (r *run) checkFleetBound(t *testing.T) {
	t.Helper()
	burst, rate := float64(r.rule.Burst), r.rule.Rate()
	if slack, T := r.boundSlack(); slack < 0 {
		t.Errorf("a %v window admitted %.0f more than burst + rate·(T + ttl) = %.0f", T.Round(time.Millisecond), -slack,
			burst+rate*(T.Seconds()+r.rule.Lease.TTL.Seconds()))
	}
	if r.rule.Algorithm != rules.FixedWindow {
		return
	}
	per := r.admittedPerWindow()
	windows := slices.Sorted(maps.Keys(per))
	for _, w := range windows {
		if per[w] > r.rule.Limit {
			t.Errorf("store window %d (%s) admitted %d > limit %d", w,
				time.Unix(0, w*int64(r.rule.Period)).Format("15:04:05"), per[w], r.rule.Limit)
		}
	}
}

// report logs the run's figures and returns admitted/ideal.
func (r *run) report(t *testing.T, what string) float64 {
	t.Helper()
	a, ideal := r.admitted(), r.ideal()
	burst, rate := float64(r.rule.Burst), r.rule.Rate()
	slack, T := r.boundSlack()
	var fallback int64
	per := make([]string, len(r.perNode))
	for i := range r.perNode {
		fallback += r.fallback[i].Load()
		per[i] = fmt.Sprint(r.perNode[i].Load())
	}
	var b strings.Builder
	worst, from := r.worstSecond()
	fmt.Fprintf(&b, "%s: admitted %d of ideal %.0f = %.3f; worst 1s %d = %.2f of burst + rate (from %v); least slack to burst + rate·(T + ttl) %.0f (T %v)",
		what, a, ideal, float64(a)/ideal, worst, float64(worst)/(burst+rate), from.Round(time.Millisecond), slack, T.Round(time.Millisecond))
	if r.rule.Algorithm == rules.FixedWindow {
		fmt.Fprintf(&b, "; worst store window %d of %d", r.worstStoreWindow(), r.rule.Limit)
	}
	fmt.Fprintf(&b, "; fallback decisions %d of %d offered; per node %s; cpu: this process %.1f, the machine %.1f of %d",
		fallback, r.offered.Load(), strings.Join(per, " "), r.cpu.Seconds()/r.length.Seconds(), r.machine, runtime.NumCPU())
	t.Log(b.String())
	if os.Getenv("FLEET_LOG") != "" {
		t.Logf("admitted per %v: %s", binWidth, r.timeline())
		if r.rule.Algorithm == rules.FixedWindow {
			t.Logf("admitted/offered per store window: %s", r.windowLine())
		}
	}
	return float64(a) / ideal
}

// timeline is the admissions per bin.
func (r *run) timeline() string {
	var b strings.Builder
	bins := map[int]int{}
	last := 0
	for _, at := range r.at {
		bins[r.bin(time.Duration(at))]++
		last = max(last, r.bin(time.Duration(at)))
	}
	for i := 0; i <= last; i++ {
		fmt.Fprintf(&b, " %d", bins[i])
	}
	return b.String()
}

func (r *run) windowLine() string {
	adm, off := r.admittedPerWindow(), r.offeredPerWindow()
	for w := range off {
		adm[w] += 0
	}
	var b strings.Builder
	for _, w := range slices.Sorted(maps.Keys(adm)) {
		fmt.Fprintf(&b, " %d/%d", adm[w], off[w])
	}
	return b.String()
}
