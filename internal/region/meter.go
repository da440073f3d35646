package region

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/allot-dev/allot/internal/clock"
)

// meter counts what passes between a region and its nodes, for the
// region's metrics: the nodes' asks (the region's demand), what the
// region lent them, and when the parent last answered. The region's share
// is its lease manager's count (lease.Core.Credited).
type meter struct {
	clk      clock.Clock
	asked    atomic.Int64 // tokens the region's nodes asked for of global keys
	lentOut  atomic.Int64 // tokens the region lent them, leases and fallback
	answered atomic.Int64 // the region's monotonic clock when the parent last answered
	ever     atomic.Bool  // the parent has answered; until then answered is the region's start
}

// intercept is a gRPC client interceptor on the calls to the parent: it
// stamps every answer.
func (m *meter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		return err
	}
	m.answered.Store(int64(m.clk.Mono()))
	m.ever.Store(true)
	return nil
}

// sinceAnswer is how long ago the parent last answered, or the region
// started if it never has (ok false).
func (m *meter) sinceAnswer() (d time.Duration, ok bool) {
	ok = m.ever.Load()
	return max(m.clk.Mono()-time.Duration(m.answered.Load()), 0), ok
}

// Meters is what a region has counted since it started.
type Meters struct {
	// Granted is the tokens the parent put into the region's leases,
	// granted or earned on rate shares: its share.
	Granted int64
	// Asked is the tokens the region's nodes asked it for on global keys,
	// in batches, a refused one again at each retry.
	Asked int64
	// Demand is what the region's nodes say their callers ask of global
	// keys, tokens a second, summed over its present holders: the demand
	// its leases ask the parent's shares by.
	Demand float64
	// Lent is the tokens the region lent its nodes, out of its leases and
	// its fallback allowances.
	Lent int64
	// FellBack is the part of Lent its fallback allowances lent.
	FellBack int64
	// SinceParent is how long ago the parent last answered (or the region
	// started, if it never has), and ParentAnswered whether it has.
	SinceParent    time.Duration
	ParentAnswered bool
}

// Meters reads the region's counts.
func (s *Store) Meters() Meters {
	since, ok := s.meter.sinceAnswer()
	return Meters{Granted: s.mgr.Credited(), Asked: s.meter.asked.Load(), Demand: s.keys.demand(s.clk.Mono()), Lent: s.meter.lentOut.Load(),
		FellBack: s.fellBack.Load(), SinceParent: since, ParentAnswered: ok}
}
