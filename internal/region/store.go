// Package region makes an allocator a region of a tree: its store lends
// the keys of global rules (rules.ScopeGlobal) out of the region's own
// leases on a parent allocator, and passes every other call to the
// region's store unchanged. The region is a node of the parent: a
// lease.Manager whose node id is the region's name holds one lease per
// global (rule, key), and the region's nodes are lent tokens out of it,
// never more than it holds and never for longer than its tokens live
// (docs/bounds.md, "Regions"). It owns the split of calls between the two
// stores, the lending, and the region's count of its holders; the
// allocator's service (internal/server) does not know it is a region.
package region

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
	"github.com/allot-dev/allot/internal/upstream"
)

// Config is what a region needs.
type Config struct {
	// Name is the region's node id at the parent: unique among the
	// parent's regions.
	Name string
	// Parent is the parent allocator's gRPC address.
	Parent string
	// Local is the region's own store: every rule but the global ones.
	Local store.Store
	// Clock is the region's clock: its lease manager's, and the one the
	// lending reads. default: the machine's
	Clock clock.Clock
	// Logger receives the region's log lines. default: slog.Default()
	Logger *slog.Logger
	// TLS, when set, dials the parent over TLS with it (its RootCAs, and a
	// client certificate for a parent that asks for one). default: plaintext
	TLS *tls.Config
	// Credentials, when set, go with every call to the parent (the bearer
	// token of the parent's fleet authentication). They need TLS.
	Credentials credentials.PerRPCCredentials
	// DialOptions are added to the dial to the parent.
	DialOptions []grpc.DialOption
	// Regions is how many regions share the parent, at least: what a
	// region cut off from its parent divides a global rule by for a key
	// the parent has told it nothing of (it divides by the most the parent
	// told it for any key, if more). default: 1, the whole rule, until the
	// parent has told it of the others
	Regions int
	// Lease tunes the region's lease manager (Transport, Clock and Logger
	// are the region's own); its zero fields take lease.DefaultConfig's.
	Lease lease.Config
}

// Store is a region's store: store.Store over the region's own store and
// its leases on the parent.
type Store struct {
	local store.Store
	clk   clock.Clock
	log   *slog.Logger
	conns *upstream.Conns
	mgr   *lease.Manager
	rtts  upstream.RoundTrips
	keys  lenders
	lost  atomic.Int64 // tokens nodes gave back that the region could not keep (lend.go)
	// regions and seenRegions: what a cut-off region divides a key the
	// parent told it nothing of by (fallback.go); fellBack counts the
	// tokens its fallback allowances lent.
	regions     int64
	seenRegions atomic.Int64
	fellBack    atomic.Int64
	withheld    atomic.Int64 // tokens withheld for absent holders' fallbacks (holders.go)
	refused     atomic.Bool  // the parent refused the region's credentials: not an outage
	meter       meter
	absent      absentees     // keys whose holders may be absent (absent.go)
	stop        chan struct{} // closes drainAbsent
	closeOnce   sync.Once
	drained     chan struct{} // closed by drainAbsent as it returns
	swept       atomic.Int64  // the region's monotonic clock at the last sweep of its lenders
	// lent, when set (tests), sees every grant's TTL beside how long the
	// region's tokens still lived when they were taken.
	lent func(ttl, live time.Duration)
}

// New dials the parent and starts the region's lease manager. Local stays
// its owner's to close.
func New(cfg Config) (*Store, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("region: a name is required: it is the region's node id at the parent")
	case cfg.Parent == "":
		return nil, errors.New("region: a parent address is required")
	case cfg.Local == nil:
		return nil, errors.New("region: the region's own store is required")
	case cfg.Regions < 0:
		return nil, fmt.Errorf("region: regions %d: want 0 (unknown) or more", cfg.Regions)
	case cfg.Credentials != nil && cfg.TLS == nil:
		return nil, errors.New("region: credentials to the parent need TLS: a token must not cross the network in plaintext")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{local: cfg.Local, clk: cfg.Clock, log: cfg.Logger, regions: int64(cfg.Regions)}
	s.keys.m = map[lenderID]*lender{}
	s.meter.clk = cfg.Clock
	s.meter.answered.Store(int64(cfg.Clock.Mono()))
	lc := cfg.Lease
	rpc := lc.RPCTimeout
	if rpc <= 0 {
		rpc = lease.DefaultConfig().RPCTimeout
	}
	timeout := func() time.Duration { return max(rpc, 3*s.rtts.Slowest()) }
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg.TLS != nil {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS))}
	}
	if cfg.Credentials != nil {
		dial = append(dial, grpc.WithPerRPCCredentials(cfg.Credentials))
	}
	dial = append(dial, grpc.WithChainUnaryInterceptor(s.meter.intercept))
	dial = append(dial, cfg.DialOptions...)
	s.conns = upstream.New(dial, cfg.Clock, cfg.Logger, timeout, rpc/4)
	if err := s.conns.Set([]string{cfg.Parent}); err != nil {
		s.conns.Close()
		return nil, fmt.Errorf("region: parent %q: %w", cfg.Parent, err)
	}
	lc.Transport = &upstream.LeaseTransport{
		API: allotv1.NewAllocatorClient(s.conns), NodeID: cfg.Name, RoundTrips: &s.rtts,
		Timed: func(string) func(error) { return func(error) {} },
		Down:  func() bool { return s.mgr.Down() },
		// The region lends by its own rules; a parent that does not know
		// one refuses its keys, which then lend nothing.
		RulesStale: func() {},
	}
	lc.Clock, lc.Logger = cfg.Clock, cfg.Logger
	lc.Hooks.Reachable = s.logParent(lc.Hooks.Reachable)
	if lc.RoundTrip == nil {
		lc.RoundTrip = s.rtts.Slowest
	}
	s.mgr = lease.NewManager(lc)
	s.stop, s.drained = make(chan struct{}), make(chan struct{})
	go s.drainAbsent(s.stop)
	return s, nil
}

// logParent logs each change of the parent's reachability (and calls
// next, if any). A parent that refuses the region's credentials is told
// apart from one that does not answer: it will not cure itself, and until
// it accepts them the region's global keys lend nothing.
func (s *Store) logParent(next func(bool, error)) func(bool, error) {
	return func(up bool, cause error) {
		code := status.Code(cause)
		s.refused.Store(!up && (code == codes.Unauthenticated || code == codes.PermissionDenied))
		switch {
		case up:
			s.log.Info("region: the parent answers")
		case code == codes.Unauthenticated || code == codes.PermissionDenied:
			s.log.Error("region: the parent refuses this region's credentials (its token or certificate); global keys lend nothing until it accepts them",
				"err", cause)
		default:
			s.log.Warn("region: the parent does not answer; global keys lend what their leases hold until they end, then the rule over the regions (limit/R)", "err", cause)
		}
		if next != nil {
			next(up, cause)
		}
	}
}

// global reports whether a request on r is the region's to lend.
func global(r *rules.Rule) bool { return r.IsGlobal() && r.Leasable() }

// Acquire implements store.Store: the global rules' requests are lent
// from the region's leases, the others go to the region's store in one
// call, and the answers come back in the requests' order.
func (s *Store) Acquire(ctx context.Context, reqs []store.AcquireRequest) ([]store.Lease, error) {
	var localReqs []store.AcquireRequest
	var at []int // where each of localReqs goes in the answer
	out := make([]store.Lease, len(reqs))
	for i := range reqs {
		if !global(reqs[i].Rule) {
			localReqs = append(localReqs, reqs[i])
			at = append(at, i)
		}
	}
	if len(localReqs) > 0 {
		got, err := s.local.Acquire(ctx, localReqs)
		if err != nil {
			return nil, err
		}
		for j, l := range got {
			out[at[j]] = l
		}
	}
	// Every global key is looked up before any is lent: the region's first
	// leases of the keys new to it leave together, rather than one after
	// the other as each waits for its own.
	for i := range reqs {
		if global(reqs[i].Rule) {
			s.keyLease(reqs[i].Rule, reqs[i].Key)
		}
	}
	for i := range reqs {
		if global(reqs[i].Rule) {
			out[i] = s.lend(ctx, &reqs[i])
		}
	}
	return out, nil
}

// Release implements store.Store: a node that gives back a global key's
// tokens stops being one of its holders here.
func (s *Store) Release(ctx context.Context, rets []store.Return) error {
	var localRets []store.Return
	for _, r := range rets {
		if global(r.Rule) {
			s.release(&r)
			continue
		}
		localRets = append(localRets, r)
	}
	if len(localRets) == 0 {
		return nil
	}
	return s.local.Release(ctx, localRets)
}

// Check implements store.Store. A global rule is not strict (rules refuse
// it), so only Envoy's service checks one: the cost is taken from the
// region's lease, or refused.
func (s *Store) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (store.Decision, error) {
	if !global(r) {
		return s.local.Check(ctx, r, key, cost)
	}
	return s.check(ctx, r, key, cost)
}

// Exists implements store.Exister for the allocator's count of a node's
// new keys: a global key costs the region's store nothing, so it counts
// as known; the others are the region's store's to say.
func (s *Store) Exists(ctx context.Context, reqs []store.AcquireRequest) ([]bool, error) {
	out := make([]bool, len(reqs))
	ex, ok := s.local.(store.Exister)
	var localReqs []store.AcquireRequest
	var at []int
	for i := range reqs {
		if global(reqs[i].Rule) || !ok {
			out[i] = true
			continue
		}
		localReqs = append(localReqs, reqs[i])
		at = append(at, i)
	}
	if len(localReqs) == 0 {
		return out, nil
	}
	got, err := ex.Exists(ctx, localReqs)
	if err != nil {
		return nil, err
	}
	for j, e := range got {
		out[at[j]] = e
	}
	return out, nil
}

// Local is the region's own store, for what the allocator asks of its
// backend alone (health, key counts, runtime overrides).
func (s *Store) Local() store.Store { return s.local }

// Lost is how many tokens nodes gave back that the region dropped.
func (s *Store) Lost() int64 { return s.lost.Load() }

// Withheld is how many tokens the region withheld from its nodes for the
// fallbacks of the nodes cut off from it.
func (s *Store) Withheld() int64 { return s.withheld.Load() }

// FellBack is how many tokens the region lent out of its fallback
// allowances while cut off from its parent.
func (s *Store) FellBack() int64 { return s.fellBack.Load() }

// Keys is how many global keys the region holds leases on at the parent.
func (s *Store) Keys() int { return s.mgr.Keys() }

// ParentDown reports whether the region's last call to the parent failed
// as an outage does.
func (s *Store) ParentDown() bool { return s.mgr.Down() }

// Close gives the region's leases back to the parent (within five
// seconds) and closes the connection to it; the region's own store is its
// owner's to close.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.drained
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if err := s.mgr.Close(ctx); err != nil && !upstream.IsUnreachable(err) {
		errs = append(errs, fmt.Errorf("region: returning leases to the parent: %w", err))
	}
	if err := s.conns.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
