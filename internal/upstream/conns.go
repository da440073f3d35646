// Package upstream is a node's side of the wire to its allocators: a
// connection to each, calls balanced over the healthy ones and failed over
// within their deadline, sick allocators ejected and probed back, each
// allocator's round trip, and the lease manager's transport on top. The
// client package holds what a service calls and configures; this holds how
// its calls reach an allocator.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/lograte"
)

// Conns are a node's connections to its allocators, one per address,
// and what the node knows of their health. A call goes to a healthy
// allocator, round-robin. One that fails it as an outage would (no
// connection, no answer in time) is ejected, and the call goes on to the
// next within the caller's deadline: one sick allocator among several is
// never an outage to the lease manager. An ejected allocator gets calls only
// when every healthy one has failed them, and is healthy again once it
// answers a health probe (or such a call).
//
// It is the grpc.ClientConnInterface the generated AllocatorClient runs on,
// so Acquire, Release, Check and GetRules all fail over the same way.
//
// grpc's own balancing cannot do this: round_robin keeps picking an
// allocator whose connection is open but which never answers (a SIGSTOPped
// process, a black-holed link), and neither its retry policy, which has no
// per-attempt deadline, nor outlier detection, which ejects on statistics
// gathered over intervals of seconds, moves a hung call to another
// allocator before the call's deadline.
type Conns struct {
	dial    []grpc.DialOption
	clk     clock.Clock
	log     *lograte.Logger
	timeout func() time.Duration // a probe's deadline: a lease call's
	// patience is the least time an attempt must have had for its timeout
	// to eject the allocator: a caller whose own deadline leaves less (a
	// request about to time out) says nothing about the allocator.
	patience time.Duration

	list atomic.Pointer[[]*endpoint] // in the order set; replaced, never changed
	next atomic.Uint64               // round-robin

	mu        sync.Mutex // the fields below, each allocator's changes of sick, and its probe state
	changed   chan struct{}
	ejected   *prometheus.GaugeVec   // nil until the metrics exist
	ejections *prometheus.CounterVec // nil until the metrics exist
	closed    bool
	probes    sync.WaitGroup
}

// endpoint is one allocator process as this node reaches it: its
// address, its connection and its health. (The process is
// internal/allocator's Allocator; the service it serves, internal/server's.)
type endpoint struct {
	addr   string
	conn   *grpc.ClientConn
	ctx    context.Context // ends when it leaves the list, or the client closes
	cancel context.CancelFunc

	sick atomic.Bool // ejected: read without the lock by every call

	// under Conns.mu
	probing bool          // a probe loop runs for it
	wait    time.Duration // before its next probe
	back    time.Time     // when it last returned to the round
}

// New returns the connections, with no allocator yet (Set adds them).
// dial holds the credentials and the caller's own options; timeout is a
// lease call's deadline, which a health probe gets too; patience is the
// least time an attempt must have had for its timeout to eject an
// allocator.
func New(dial []grpc.DialOption, clk clock.Clock, log *slog.Logger, timeout func() time.Duration, patience time.Duration) *Conns {
	// Reconnect quickly once an allocator is back: the default backoff
	// grows to two minutes, far longer than a lease, and nodes must
	// return to leases within a few refresh intervals.
	dial = append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
		MinConnectTimeout: time.Second,
	})}, dial...)
	p := &Conns{dial: dial, clk: clk, log: lograte.New(log, clk, 0, 0), timeout: timeout, patience: patience,
		changed: make(chan struct{})}
	p.list.Store(&[]*endpoint{})
	return p
}

// Set makes addrs the allocators, in that order: new ones are dialed (and
// start healthy), those that left are closed; calls in flight on them fail
// over to the others.
func (p *Conns) Set(addrs []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	old := map[string]*endpoint{}
	for _, a := range *p.list.Load() {
		old[a.addr] = a
	}
	next := make([]*endpoint, 0, len(addrs))
	var errs []error
	seen := map[string]bool{}
	for _, addr := range addrs {
		if seen[addr] {
			continue
		}
		seen[addr] = true
		if a, ok := old[addr]; ok {
			delete(old, addr)
			next = append(next, a)
			continue
		}
		// passthrough: the address is dialed as given, and with TLS its
		// host is the name the certificate must carry, unless
		// client.Config.TLS.ServerName says otherwise.
		conn, err := grpc.NewClient("passthrough:///"+addr, p.dial...)
		if err != nil {
			errs = append(errs, fmt.Errorf("allocator %s: %w", addr, err))
			continue
		}
		conn.Connect() // ready before the first call needs it
		a := &endpoint{addr: addr, conn: conn}
		a.ctx, a.cancel = context.WithCancel(context.Background())
		next = append(next, a)
		p.publishLocked(a)
	}
	for _, a := range old {
		a.cancel()
		a.conn.Close()
		if p.ejected != nil {
			p.ejected.DeleteLabelValues(a.addr)
			p.ejections.DeleteLabelValues(a.addr)
		}
	}
	p.list.Store(&next)
	close(p.changed)
	p.changed = make(chan struct{})
	return errors.Join(errs...)
}

// SetMetrics exports each allocator's state from now on.
func (p *Conns) SetMetrics(ejected *prometheus.GaugeVec, ejections *prometheus.CounterVec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ejected, p.ejections = ejected, ejections
	for _, a := range *p.list.Load() {
		p.publishLocked(a)
	}
}

func (p *Conns) publishLocked(a *endpoint) {
	if p.ejected == nil {
		return
	}
	v := 0.0
	if a.sick.Load() {
		v = 1
	}
	p.ejected.WithLabelValues(a.addr).Set(v)
	p.ejections.WithLabelValues(a.addr) // present from the start, at 0
}

// Answer, given to a call as a call option, learns which allocator
// answered (Addr) and how long that attempt took (Took), without the
// failed ones.
type Answer struct {
	grpc.EmptyCallOption
	Addr string
	Took time.Duration
}

// Invoke sends a call to the allocators in turn until one answers it, the
// answer is an error that another allocator would give too (a rejection),
// or the caller's deadline ends. While another healthy allocator follows,
// an attempt has half of the time left: RPCTimeout spans at least three
// round trips, so a healthy allocator has a round trip and a half to
// answer, and one that never answers leaves as much to the next. The last
// healthy one has all that is left, and ejected ones what it leaves; but a
// call that waits for ready, made while the node thinks every allocator
// down, splits its time among all of them, so that whichever comes back
// first answers it.
func (p *Conns) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	order, healthy, err := p.order(ctx, opts)
	if err != nil {
		return err
	}
	waits := waitsForReady(opts)
	var failed []string
	for i := 0; ; i++ { // the last allocator's attempt returns
		a := order[i]
		b := budgetAll
		if i+1 < healthy || ((waits || i >= healthy) && i+1 < len(order)) {
			b = budgetHalf
		}
		took, again, err := p.try(ctx, a, b, method, args, reply, opts)
		if err == nil {
			p.restore(a, "it answered a call")
			for _, o := range opts {
				if ans, ok := o.(*Answer); ok {
					ans.Addr, ans.Took = a.addr, took
				}
			}
			return nil
		}
		if !again || i+1 == len(order) {
			// A refusal is the answer, as the allocator worded it: the
			// lease manager reads which request it names.
			if len(failed) == 0 || !IsUnreachable(err) {
				return err
			}
			s := status.Convert(err)
			return status.Errorf(s.Code(), "%d allocators failed: %s; %s: %s", len(failed)+1, strings.Join(failed, "; "),
				a.addr, s.Message())
		}
		failed = append(failed, fmt.Sprintf("%s: %s", a.addr, status.Convert(err).Message()))
	}
}

// NewStream opens a stream on a healthy allocator, without failover: the
// allocators' service has no streams.
func (p *Conns) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	order, _, err := p.order(ctx, opts)
	if err != nil {
		return nil, err
	}
	return order[0].conn.NewStream(ctx, desc, method, opts...)
}

// order lists the allocators for one call: the healthy ones round-robin,
// then the ejected ones, as a last resort. With none known, a call that
// waits for ready waits for one to be added.
func (p *Conns) order(ctx context.Context, opts []grpc.CallOption) (order []*endpoint, healthy int, err error) {
	list := *p.list.Load()
	for len(list) == 0 {
		p.mu.Lock()
		changed := p.changed
		list = *p.list.Load()
		p.mu.Unlock()
		if len(list) > 0 {
			break
		}
		if !waitsForReady(opts) {
			return nil, 0, status.Error(codes.Unavailable, "allot: no allocator known")
		}
		select {
		case <-changed:
			list = *p.list.Load()
		case <-ctx.Done():
			return nil, 0, status.FromContextError(ctx.Err()).Err()
		}
	}
	n := len(list)
	start := int(p.next.Add(1) % uint64(n))
	order = make([]*endpoint, 0, n)
	var sick []*endpoint
	for i := range n {
		if a := list[(start+i)%n]; a.sick.Load() {
			sick = append(sick, a)
		} else {
			order = append(order, a)
		}
	}
	return append(order, sick...), len(order), nil
}

// Close ends the probes and closes every connection.
func (p *Conns) Close() error {
	p.mu.Lock()
	p.closed = true
	list := *p.list.Load()
	for _, a := range list {
		a.cancel()
	}
	p.mu.Unlock()
	p.probes.Wait()
	var errs []error
	for _, a := range list {
		if err := a.conn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
