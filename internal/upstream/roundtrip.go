package upstream

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RoundTrips keeps each allocator's Acquire round trip, an average of the
// calls it answered, and exports it. Lease renewals plan for the slowest
// allocator heard from lately: calls are balanced over all of them. The
// zero value is ready to use.
type RoundTrips struct {
	// Gauge, when set (before the first Observe), exports each average.
	Gauge *prometheus.GaugeVec

	mu sync.Mutex
	by map[string]*roundTrip
}

type roundTrip struct {
	avg  time.Duration
	seen time.Time
}

const (
	// roundTripWeight is the weight of each new call in the average.
	roundTripWeight = 0.2
	// roundTripForget drops an allocator not heard from for this long.
	roundTripForget = time.Minute
)

// Observe adds one answered call's round trip to addr's average.
func (r *RoundTrips) Observe(addr string, d time.Duration) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = make(map[string]*roundTrip)
	}
	rt, ok := r.by[addr]
	if !ok {
		rt = &roundTrip{avg: d}
		r.by[addr] = rt
	}
	rt.avg += time.Duration(roundTripWeight * float64(d-rt.avg))
	rt.seen = now
	if r.Gauge != nil {
		r.Gauge.WithLabelValues(addr).Set(rt.avg.Seconds())
	}
}

// Slowest is the largest average among the allocators heard from lately.
func (r *RoundTrips) Slowest() time.Duration {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var worst time.Duration
	for addr, rt := range r.by {
		if now.Sub(rt.seen) > roundTripForget {
			delete(r.by, addr)
			if r.Gauge != nil {
				r.Gauge.DeleteLabelValues(addr)
			}
			continue
		}
		worst = max(worst, rt.avg)
	}
	return worst
}
