package client

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// roundTrips keeps each allocator's Acquire round trip, an average of the
// calls it answered, and exports it. Lease renewals plan for the slowest
// allocator heard from lately: calls are balanced over all of them.
type roundTrips struct {
	mu    sync.Mutex
	by    map[string]*roundTrip
	gauge *prometheus.GaugeVec // nil: not exported
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

func (r *roundTrips) observe(addr string, d time.Duration) {
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
	if r.gauge != nil {
		r.gauge.WithLabelValues(addr).Set(rt.avg.Seconds())
	}
}

// slowest is the largest average among the allocators heard from lately.
func (r *roundTrips) slowest() time.Duration {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var worst time.Duration
	for addr, rt := range r.by {
		if now.Sub(rt.seen) > roundTripForget {
			delete(r.by, addr)
			if r.gauge != nil {
				r.gauge.DeleteLabelValues(addr)
			}
			continue
		}
		worst = max(worst, rt.avg)
	}
	return worst
}
