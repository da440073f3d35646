package chaos

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// row is one scenario's figures: its line, and its row of the table.
type row struct {
	name     string
	b        bounds
	extra    float64 // tokens the fault may add to each window's bound
	why      string
	back     time.Duration
	fallback int64
	// The closed rule's decisions in fallback: admitted must be 0.
	closedAdmitted, closedDenied int64
	errors                       int64
	leaked                       int
	leakedList                   string
	notes                        string
	failed                       bool
}

// check asserts what every scenario promises.
func (r *row) check(t *testing.T, sc *scenario, m *measure) {
	t.Helper()
	if r.errors > 0 {
		t.Errorf("callers saw %d errors, the first: %v", r.errors, m.firstErr.Load())
	}
	if r.leaked > 0 {
		t.Errorf("%d goroutines leaked: %s", r.leaked, r.leakedList)
	}
	if r.closedAdmitted > 0 {
		t.Errorf("the failure: closed rule admitted %d without the allocator", r.closedAdmitted)
	}
	if r.b.over > 0 {
		t.Errorf("a %v window admitted %.0f more than its bound%s; worst 1s window %d (burst + 1.1·rate = %.0f), "+
			"worst window of 1s or more %.3f of burst + rate·(T + ttl)",
			r.b.overSpan, r.b.over, r.allowance(), r.b.worst1s, r.b.bound1s, r.b.worstRatio)
	}
	switch {
	case r.back == never:
		t.Errorf("nodes were not back on leases for a whole second after the fault ended")
	case r.back > maxBack:
		t.Errorf("nodes were back on leases %v after the fault ended, more than %v", r.back, maxBack)
	}
	if sc.outage && (m.openModes[modeFallback].Load() == 0 || r.closedDenied == 0) {
		t.Errorf("an outage without fallback decisions (%d) or refusals of the closed rule (%d): the fault did not reach the nodes",
			m.openModes[modeFallback].Load(), r.closedDenied)
	}
	if sc.onLeases {
		if n := m.fallbackFrom(time.Second); n > 0 {
			t.Errorf("%d fallback decisions after the first second: the fault reached the nodes", n)
		}
	}
}

func (r *row) allowance() string {
	if r.extra == 0 {
		return ""
	}
	return fmt.Sprintf(" + %.0f (%s)", r.extra, r.why)
}

// maxBack is how soon after a fault nodes must be back on leases: a lease
// call's backoff (at most 250ms) and a few round trips.
const maxBack = 2 * time.Second

// Values of row.back that are not durations.
const (
	never         = -1
	notApplicable = -2 // a window rule falls back at every window's start
)

func (r *row) backString() string {
	switch r.back {
	case never:
		return "never"
	case notApplicable:
		return "—"
	}
	return fmt.Sprintf("%.1f s", r.back.Seconds())
}

// line is the scenario's one line of output.
func (r *row) line() string {
	allowed := ""
	if r.extra > 0 {
		allowed = fmt.Sprintf("; bounds asserted%s", r.allowance())
	}
	return fmt.Sprintf("%s: admitted %d = %.3f of ideal, %.3f of burst+rate·(T+ttl); worst window ≥1s %.3f of its bound (%v); "+
		"worst 1s %d = %.3f of burst+1.1·rate; back on leases %s after the fault; fallback decisions %d; "+
		"closed rule without the allocator: %d admitted, %d denied; errors %d; leaked goroutines %d%s%s",
		r.name, r.b.admitted, float64(r.b.admitted)/r.b.ideal, float64(r.b.admitted)/r.b.whole, r.b.worstRatio, r.b.worstSpan,
		r.b.worst1s, float64(r.b.worst1s)/r.b.bound1s, r.backString(), r.fallback, r.closedAdmitted, r.closedDenied,
		r.errors, r.leaked, prefixed("; ", r.notes), allowed)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// writeTable writes the Markdown table of a run.
func writeTable(path string, rows []row, scale float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Chaos suite, %s (`make chaos`, %s, %d cores): 8 nodes, one key under a token bucket of 2000/s, burst 200, "+
		"lease ttl 1 s, `failure: open`, offered twice its rate, and a `failure: closed` twin offered 200/s; runs of %s, "+
		"a real Redis and allocator processes (the store-clock scenarios: one allocator in the test's process on the memory store).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.NumCPU(), seconds(scaled(runLength, scale)))
	b.WriteString("| scenario | admitted / ideal | whole run / bound | worst window ≥ 1 s / bound | worst 1 s / (burst + 1.1·rate) | " +
		"back on leases | fallback decisions | closed rule without allocator: admitted / denied | errors | leaked goroutines | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		notes := r.notes
		if r.extra > 0 {
			notes = strings.TrimPrefix(notes+fmt.Sprintf("; bounds asserted + %.0f: %s", r.extra, r.why), "; ")
		}
		if r.failed {
			notes = strings.TrimPrefix(notes+"; **FAILED**", "; ")
		}
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.3f | %s | %d | %d / %d | %d | %d | %s |\n",
			r.name, float64(r.b.admitted)/r.b.ideal, float64(r.b.admitted)/r.b.whole, r.b.worstRatio, float64(r.b.worst1s)/r.b.bound1s,
			r.backString(), r.fallback, r.closedAdmitted, r.closedDenied, r.errors, r.leaked, notes)
	}
	b.WriteString("\nideal: burst + rate·T. bound: burst + rate·(T + ttl) for a window of T; the worst window is the one of 1 s or more " +
		"closest to its bound. back on leases: from the end of the fault to the first second without a fallback decision. " +
		"Above 1.000 in a bound column is over-admission.\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
